"""The loss-misuse family on hand-made statistics and events (pure: no torch, no monitor)."""

import pytest

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families import lossfn
from neuraldbg_cli.reason.families.base import Machine, _rounded
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.lossfn import classify_loss_call
from neuraldbg_cli.trace.events import EventType, Kind, LossCallStats, SemanticEvent, StepRecord

TH = Thresholds()


def stats(name, inp, tgt=None, lo=-1.0, hi=1.0, rows=None, classes=None, reduction="mean", module=None, bc=None,
          dtype="float32"):
    terms = 1
    for d in inp:
        terms *= d
    if classes and name in ("cross_entropy", "nll_loss"):
        terms //= classes
    return LossCallStats(name, module, inp, tgt, bc, reduction, dtype, classes, terms, lo, hi, rows)


@pytest.mark.parametrize(
    "s, state",
    [
        (stats("mse_loss", (64, 1), (64,), bc=(64, 64)), "broadcast"),
        (stats("mse_loss", (64, 1), (64, 1)), "normal"),
        (stats("cross_entropy", (64, 10), (64,), 0.0, 0.6, 1e-7, 10), "probabilities_to_ce"),
        (stats("cross_entropy", (64, 10), (64,), -3.0, 4.0, 2.5, 10), "normal"),  # logits
        (stats("cross_entropy", (64, 10), (64,), 0.0, 0.9, 0.4, 10), "normal"),  # in [0, 1], rows not 1: logits
        # 6 rows of 2 classes (12 values, too few for the range alone): rows that sum to 1 are softmax's
        (stats("cross_entropy", (6, 2), (6,), 0.1, 0.9, 1e-7, 2), "probabilities_to_ce"),
        (stats("cross_entropy", (6, 2), (6,), -0.4, 0.9, 1e-7, 2), "normal"),  # a negative value: logits
        (stats("cross_entropy", (64, 10), (64,), 0.0, 0.6, 5e-3, 10, dtype="bfloat16"), "probabilities_to_ce"),
        (stats("binary_cross_entropy_with_logits", (64, 1), (64, 1), 0.02, 0.97), "probabilities_to_logits_loss"),
        (stats("binary_cross_entropy_with_logits", (64, 1), (64, 1), -2.0, 3.0), "normal"),
        (stats("binary_cross_entropy_with_logits", (2, 1), (2, 1), 0.2, 0.7), "normal"),  # two logits: chance
        (stats("nll_loss", (64, 10), (64,), -4.0, 3.5, 12.0, 10), "logits_to_nll"),
        (stats("nll_loss", (64, 10), (64,), -9.0, 0.0, 9.0, 10), "normal"),  # log_softmax
        (stats("nll_loss", (64, 10), (64,), 0.01, 0.5, 1e-7, 10), "probabilities_to_nll"),
        (stats("kl_div", (64, 10), (64, 10), 0.01, 0.5, 1e-7, 10), "probabilities_to_nll"),
        (stats("kl_div", (64, 10), (64, 10), -7.0, -0.01, 9.0, 10), "normal"),
        (stats("ctc_loss", (50, 16, 13), (80,), -0.6, 0.7, 1.3, 13), "logits_to_nll"),  # no log_softmax
        (stats("ctc_loss", (50, 16, 13), (80,), -9.0, -0.01, 1e-6, 13), "normal"),
        (stats("cross_entropy", (512, 10), (512,), -3.0, 4.0, 2.5, 10, "sum"), "sum_reduction"),
        (stats("cross_entropy", (8, 10), (8,), -3.0, 4.0, 2.5, 10, "sum"), "normal"),  # a few terms
        (stats("nll_loss", (64, 10), (64,), float("nan"), float("nan"), float("nan"), 10), "normal"),  # non_finite's
    ],
)
def test_classify_loss_call(s, state):
    assert classify_loss_call(s, TH) == state


class Board:
    """The Monitor's bookkeeping, as much as an observer needs: machines that emit SemanticEvents."""

    def __init__(self):
        self.th, self.models, self.machines, self.since, self.grad_since = TH, {}, {}, {}, {}
        self.events = []

    def feed(self, key, initial, state, step, metrics, etype, site, root, module):
        m = self.machines.setdefault(key, Machine(initial, TH.debounce, TH.debounce_early))
        for old, new, at, mt in m.observe(state, step, metrics):
            self.events.append(
                SemanticEvent(type=etype, step=at, module=module, root=root, from_=old, to=new,
                              metrics=_rounded(mt), site=site)
            )

    def reset(self, key, state):
        self.machines.pop(key, None)


SGD = [{"type": "SGD", "groups": [{"lr": 0.01}]}]


def run(calls_per_step, extra_events=(), optimizers=SGD):
    board = Board()
    obs = lossfn.LossCallObserver(board)
    for step, calls in enumerate(calls_per_step):
        obs.observe(StepRecord(step=step, sampled=True, loss_calls=calls))
    return board.events, lossfn.loss_misuse(Context(events=[*board.events, *extra_events], optimizers=list(optimizers)))


def test_broadcast_is_confirmed_from_its_first_call_with_the_exact_fix():
    s = stats("mse_loss", (64, 1), (64,), bc=(64, 64))
    events, h = run([{"mse_loss": s}] * 5)
    assert [(e.type, e.step, e.to, e.site) for e in events] == [("loss_call_health", 0, "broadcast", "loss_call")]
    assert h.kind is Kind.loss_misuse and h.confidence >= 0.85 and h.origin.step == 0
    assert "F.mse_loss gets input [64, 1] and target [64]: they broadcast to [64, 64]" in h.summary
    assert "target.view(-1, 1)" in h.suggestions[0] and "pred.squeeze(-1)" in h.suggestions[0]


def test_softmax_before_a_cross_entropy_module():
    s = stats("cross_entropy", (32, 10), (32,), 0.0, 0.4, 1e-7, 10, module="CrossEntropyLoss")
    _, h = run([{"cross_entropy": s}] * 4)
    assert h.summary.startswith("nn.CrossEntropyLoss gets probabilities")
    assert "remove the softmax before nn.CrossEntropyLoss" in h.suggestions[0]


@pytest.mark.parametrize(
    "s, words",
    [
        (stats("binary_cross_entropy_with_logits", (64, 1), (64, 1), 0.1, 0.9), "remove the sigmoid"),
        (stats("nll_loss", (64, 10), (64,), -4.0, 3.5, 12.0, 10), "F.log_softmax(logits, dim=1)"),
        (stats("kl_div", (64, 10), (64, 10), 0.0, 0.5, 1e-7, 10), "F.log_softmax(logits, dim=-1)"),
        (stats("ctc_loss", (50, 16, 13), (80,), -0.6, 0.7, 1.3, 13), "F.log_softmax(output, dim=-1) before F.ctc"),
    ],
)
def test_each_misuse_names_its_fix(s, words):
    _, h = run([{s.name: s}] * 3)
    assert h is not None and words in h.suggestions[0], h.suggestions


def test_healthy_calls_and_a_single_odd_call_say_nothing():
    good = stats("cross_entropy", (64, 10), (64,), -3.0, 4.0, 2.5, 10)
    odd = stats("cross_entropy", (64, 10), (64,), 0.0, 0.4, 1e-7, 10)
    events, h = run([{"cross_entropy": good}] * 3 + [{"cross_entropy": odd}] + [{"cross_entropy": good}] * 3)
    assert events == [] and h is None


def test_a_summed_reduction_is_a_cause_only_of_an_unstable_loss():
    s = stats("mse_loss", (256, 4), (256, 4), reduction="sum")
    _, h = run([{"mse_loss": s}] * 4)
    assert h is None
    diverging = SemanticEvent(type=EventType.optimizer_instability.value, step=5, root="Net", from_="normal",
                              to="diverging", site="loss")
    _, h = run([{"mse_loss": s}] * 4, [diverging])
    assert h is not None and "reduction='mean'" in h.suggestions[0] and "1024" in h.suggestions[0]
    assert h.confidence == pytest.approx(0.6)
    # under Adam the sum cancels out of every step; under a manual update (no optimizer: jcjohnson's loop sums at
    # lr 1e-4 and trains) the step it scales is unknown: a note with its advice, not the cause of the climb
    assert run([{"mse_loss": s}] * 4, [diverging], [{"type": "Adam", "groups": [{"lr": 1e-3}]}])[1] is None
    _, manual = run([{"mse_loss": s}] * 4, [diverging], [])
    assert manual.confidence < 0.5 and "step size this scales is unknown" in manual.summary
    assert "reduction='mean'" in manual.suggestions[0]


def test_loss_names_cover_what_the_probe_reads():
    from neuraldbg_cli.probe import lossprobe, provenance

    assert set(provenance.FLOAT_TARGET_LOSSES) | set(lossprobe.EXTRA_LOSSES) <= set(lossfn.LOSS_NAMES)
    assert set(lossprobe.MODULE_LOSSES.values()) <= set(lossfn.LOSS_NAMES)
    assert {c.__name__ for c in lossprobe.MODULE_LOSSES} == {lossfn.MODULES[n] for n in lossprobe.MODULE_LOSSES.values()}


def test_a_summed_class_loss_divided_afterwards_is_no_misuse():
    """Hugging Face models sum the token losses and divide by the tokens in the batch: the series starts near
    ln(classes), not 512 x ln(classes). A sum left undivided starts near the latter and stays a cause."""
    s = stats("cross_entropy", (512, 10), (512,), -3.0, 4.0, 2.5, 10, "sum")

    def diverging(start):
        return SemanticEvent(type=EventType.optimizer_instability.value, step=5, root="Net", from_="normal",
                             to="diverging", site="loss", metrics={"start": start})

    _, h = run([{"cross_entropy": s}] * 4, [diverging(2.4)])
    assert h is None
    _, h = run([{"cross_entropy": s}] * 4, [diverging(512 * 2.4)])
    assert h is not None and "reduction='mean'" in h.suggestions[0]


def _signed_run(losses, calls):
    board = Board()
    obs = lossfn.LossCallObserver(board)
    for step, v in enumerate(losses):
        obs.observe(StepRecord(step=step, sampled=True, loss_calls=calls, losses={"": v}))
    return board.events, lossfn.loss_misuse(Context(events=board.events))


def test_a_negated_loss_made_of_losses_never_below_zero_is_named_with_its_fix():
    # loss = -F.mse_loss(out, y): negative from the first step, and falling as the outputs grow
    mse = {"mse_loss": stats("mse_loss", (64, 4), (64, 4))}
    falling = [-1.0 * 1.3**i for i in range(12)]
    events, h = _signed_run(falling, mse)
    assert [e.to for e in events] == ["negated"] and h is not None and h.kind == Kind.loss_misuse
    assert "wrong sign" in h.summary and "remove the minus" in h.suggestions[0]


def test_negative_losses_that_may_be_negative_are_not_called_negated():
    falling = [-1.0 * 1.3**i for i in range(12)]
    mse = {"mse_loss": stats("mse_loss", (64, 4), (64, 4))}
    # a policy loss: cross-entropy per sample, weighted by advantages that can be negative
    policy = {"cross_entropy": stats("cross_entropy", (64, 4), (64,), classes=4, reduction="none")}
    assert _signed_run(falling, policy) == ([], None)
    # a log-likelihood the script writes itself (a flow, a Gaussian NLL) beside no criterion
    assert _signed_run(falling, {}) == ([], None)
    # a loss that was ever >= 0 (a regulariser subtracted later on) is not made negative by a sign alone
    assert _signed_run([0.5] + falling, mse) == ([], None)
    # negative but not falling: a constant offset, not a maximised criterion
    assert _signed_run([-1.0 - 0.01 * i for i in range(12)], mse) == ([], None)


def _dice_like(dips, n=60, level=1.5):
    """A loss that sits near `level` with dips below 0 at the given {step: value}."""
    return [dips.get(i, level + 0.05 * ((i * 7) % 5 - 2)) for i in range(n)]


def test_a_loss_that_dips_below_zero_again_and_again_has_an_unbounded_term():
    # BCEWithLogits + a Dice ratio of raw logits: the ratio's denominator passes through 0 on some batches
    bce = {"binary_cross_entropy_with_logits": stats("binary_cross_entropy_with_logits", (16, 1, 32, 32),
                                                     (16, 1, 32, 32), -3.0, 2.0)}
    events, h = _signed_run(_dice_like({3: -0.6, 13: -1.4, 26: -4.5}), bce)
    assert [(e.to, e.step) for e in events] == [("unbounded", 3)]
    assert events[0].metrics["dips"] == 2 and events[0].metrics["deepest"] == -1.4
    assert h is not None and h.kind == Kind.loss_misuse and h.origin.step == 3
    assert "Dice" in h.summary and "F.binary_cross_entropy_with_logits" in h.summary
    assert "sigmoid" in h.suggestions[0]


def test_losses_below_zero_by_design_or_by_rounding_are_not_unbounded():
    bce = {"binary_cross_entropy_with_logits": stats("binary_cross_entropy_with_logits", (64, 1), (64, 1))}
    # one dip alone: it may be a batch of its own
    assert _signed_run(_dice_like({20: -3.0}), bce) == ([], None)
    # dips a fraction of the level below 0 (an entropy bonus subtracted at a small weight)
    assert _signed_run(_dice_like({10: -0.1, 20: -0.2, 30: -0.1}), bce) == ([], None)
    # a loss that moves below 0 and stays there (a learned log-variance term, an entropy bonus at the end)
    crossing = [1.5 - 0.05 * i for i in range(60)]
    assert _signed_run(crossing, bce) == ([], None)
    # an actor-critic's summed episode loss: its policy term changes sign by design, and its positive values
    # spread over orders of magnitude with the episode's length; its dips lie within that spread
    episodes = [0.01 * 3 ** (i % 9) for i in range(60)]
    episodes[20], episodes[45] = -5.0, -1.5
    assert _signed_run(episodes, bce) == ([], None)
    # no loss call bounded below 0 (a hand-written log-likelihood alone) or a policy loss per sample
    assert _signed_run(_dice_like({3: -0.6, 13: -1.4}), {}) == ([], None)
    policy = {"cross_entropy": stats("cross_entropy", (64, 4), (64,), classes=4, reduction="none")}
    assert _signed_run(_dice_like({3: -0.6, 13: -1.4}), policy) == ([], None)
