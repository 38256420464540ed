"""The family registry: one failure family, one module. Every Kind judged in one run has exactly one rule,
registered by exactly one family module; a family added in a test plugs in without editing other files."""
import importlib
import pkgutil
import subprocess
import sys

import pytest

import neuraldbg_cli.reason.families as families
from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families import FAMILIES, RULES, rules_of
from neuraldbg_cli.reason.families.base import Family, Observer
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.evidence import _hyp
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.trace.events import CROSS_RANK_KINDS, EventType, Kind, SemanticEvent, StepRecord

TH = Thresholds()
SHARED = {"base", "context", "evidence", "advice", "settings", "causes", "loss_model", "gradient_observer"}
# what families share, or one family's part apart from its rules (loss_model, gradient_observer): no FAMILY of their own


def test_every_kind_has_one_rule_in_one_family():
    owners = {}
    for family in FAMILIES:
        for rule in family.rules:
            owners.setdefault(rule.__name__, []).append(family.name)
    judged = [k.value for k in Kind if k not in CROSS_RANK_KINDS]
    assert sorted(owners) == sorted(judged)
    assert all(len(fs) == 1 for fs in owners.values()), owners
    assert [r.__name__ for r in RULES] == judged  # proposed in the contract's Kind order


def test_every_family_module_is_registered():
    """A module of the package is either shared or a family: it exposes FAMILY, listed in FAMILIES, and its
    rules are its own (defined in that module)."""
    registered = {f.name: f for f in FAMILIES}
    assert len(registered) == len(FAMILIES)
    for info in pkgutil.iter_modules(families.__path__):
        if info.name in SHARED:
            continue
        module = importlib.import_module(f"neuraldbg_cli.reason.families.{info.name}")
        family = getattr(module, "FAMILY", None)
        assert isinstance(family, Family), f"families/{info.name}.py has no FAMILY"
        assert registered.get(family.name) is family, f"families/{info.name}.py is not in FAMILIES"
        assert all(r.__module__ == module.__name__ for r in family.rules)


def test_registry_names_the_culprit():
    extra = Family("extra", None, (FAMILIES[0].rules[0],))
    with pytest.raises(RuntimeError, match="data_anomaly registered 2 times"):
        rules_of(FAMILIES + (extra,))
    with pytest.raises(RuntimeError, match="no rule for loss_plateau"):
        rules_of(f for f in FAMILIES if f.name != "loss")

    def not_a_kind(ctx):
        return None

    with pytest.raises(RuntimeError, match="not_a_kind is not a kind"):
        rules_of(FAMILIES + (Family("odd", None, (not_a_kind,)),))


class LossSignObserver(Observer):
    """A test family's observer: a negative loss is 'negative' (fed through the shared machines)."""

    def observe(self, rec: StepRecord) -> None:
        if rec.loss is not None:
            state = "negative" if rec.loss < 0 else "normal"
            self.board.feed(("sign", "Net"), "normal", state, rec.step, {"loss": rec.loss},
                            EventType.optimizer_instability.value, "loss", "Net", None)


def data_anomaly(ctx: Context):
    """The test family's rule, standing in for the data family's."""
    evs = ctx.select(to=["negative"])
    return _hyp(Kind.data_anomaly, 0.9, evs[0], evs[0].step, "negative loss", evs, []) if evs else None


def test_a_family_plugs_in_without_editing_other_files():
    test_family = Family("loss_sign", LossSignObserver, (data_anomaly,))
    registry = tuple(f for f in FAMILIES if f.name != "data") + (test_family,)
    rules = rules_of(registry)
    assert data_anomaly in rules and len(rules) == len(RULES)

    events: list[SemanticEvent] = []
    mon = Monitor(TH, events.append, families=registry)
    for step in range(6):
        mon.observe(StepRecord(step=step, sampled=False, loss=1.0 if step < 2 else -1.0))
    mon.observe(StepRecord(step=6, sampled=False, loss=1.0))
    mon.observe(StepRecord(step=7, sampled=False, loss=1.0))  # cut short by the end: confirmed by finish
    mon.finish()
    sign = [e for e in events if e.site == "loss" and e.root == "Net"]
    assert [(e.from_, e.to, e.step) for e in sign] == [("normal", "negative", 2), ("negative", "normal", 6)]
    assert events[-1].type == EventType.run_summary.value
    h = next(r for r in rules if r is data_anomaly)(Context(events=events))
    assert h is not None and h.origin.step == 2


def test_families_import_no_io_and_no_torch():
    code = ("import sys, neuraldbg_cli.reason.families, neuraldbg_cli.reason.monitor, neuraldbg_cli.reason.reasoner; "
            "bad = [m for m in ('torch', 'neuraldbg_cli.trace.reader', 'neuraldbg_cli.trace.writer', "
            "'neuraldbg_cli.trace.job', 'neuraldbg_cli.launch.session', 'neuraldbg_cli.launch.scriptexec') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
