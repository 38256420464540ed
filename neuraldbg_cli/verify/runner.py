"""`neuraldbg verify RUN_DIR`: re-run the recorded command for N optimizer steps, once unchanged (the control)
and once per fix the hypotheses list (or `--fix`), on each seed, and judge which fixes cure their hypothesis.
The trials run one at a time (trialrun); the verdicts go to RUN_DIR/verify.json, which `explain` shows next
to each fix."""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.reason import fixspec
from neuraldbg_cli.reason.families import loop
from neuraldbg_cli.trace.events import Report
from neuraldbg_cli.verify import overlay
from neuraldbg_cli.verify.trialrun import LATE, Command, Outcome, python_for, read_outcome, run_one

SCHEMA = "neuraldbg.verify/1"
VERIFY_FILE = "verify.json"
TRIALS_DIR = "verify"
STEPS_CAP = 300  # the default number of steps is never more than this
REPLAY_S = 60.0  # a control that did not show the symptom yet is run again as long as the original run, within this
START_S = 4.0  # a trial's start-up (python, torch, neuraldbg), for the time estimate


@dataclass
class Candidate:
    """A fix to try against one hypothesis kind."""

    kind: str
    fix_id: str
    params: dict[str, Any]
    text: str
    onset: int = 0

    @property
    def spec(self) -> str:
        return fixspec.spec(self.fix_id, self.params)


@dataclass
class Plan:
    run_dir: Path
    cmd: Command
    candidates: list[Candidate]
    steps: int
    seeds: list[int | None]
    timeout: float
    estimate_s: float
    original_ok: bool = True  # the recorded run finished (a control that crashes is then verify's problem)
    no_overlay: str = ""  # why the trials cannot run in an overlay ('' : they do)
    specs: list[str] = field(default_factory=list)
    steps_given: bool = False  # --steps: the trials run exactly that long (no longer run for a slow start)
    label: str = ""  # trials run again longer: their folders' suffix
    observed: int = 0  # the original run's optimizer steps
    wall_s: float = 0.0  # and its wall time

    def __post_init__(self) -> None:
        self.specs = list(dict.fromkeys(c.spec for c in self.candidates))

    def trial_dir(self, spec: str | None, seed: int | None) -> Path:
        name = "control" if spec is None else spec.replace(":", "-").replace(",", "_")
        name += f".{self.label}" if self.label else ""
        return self.run_dir / TRIALS_DIR / (name if seed is None else f"{name}.seed{seed}")


def load_command(run_dir: Path) -> tuple[Command, dict[str, Any], Report]:
    """The recorded command, the run's meta.json and its explain report; NeuraldbgError on bad input."""
    from neuraldbg_cli.reason import reasoner
    from neuraldbg_cli.trace.job import read_job

    job = read_job([run_dir])
    meta = job.meta or job.runs[0].meta
    if job.distributed or (isinstance(meta.get("world_size"), int) and meta["world_size"] > 1):
        raise NeuraldbgError("neuraldbg: verify cannot re-run a distributed (torchrun) job yet")
    argv, cwd, mode = meta.get("argv"), meta.get("cwd"), meta.get("mode", "script")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv) or not isinstance(cwd, str):
        raise NeuraldbgError(f"neuraldbg: {run_dir}/meta.json records no command to re-run (argv, cwd)")
    if not Path(cwd).is_dir():
        raise NeuraldbgError(f"neuraldbg: the run's working directory {cwd} is gone; nothing to re-run")
    if mode != "module" and not (Path(cwd) / argv[0]).exists():
        raise NeuraldbgError(f"neuraldbg: the script {argv[0]} is gone (moved or deleted since the run)")
    settings: dict[str, Any] = _field(meta, "settings", dict, {})
    env: dict[str, Any] = _field(meta, "env", dict, {})
    cmd = Command(
        argv=argv,
        mode=str(mode),
        cwd=cwd,
        env={str(k): str(v) for k, v in env.items()},
        python=python_for(meta.get("executable")),
        every=_field(settings, "every", int, None),
        thresholds=_field(settings, "thresholds", dict, {}),
    )
    return cmd, meta, reasoner.explain_job(job)


def _field(doc: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = doc.get(key)
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


def candidates(report: Report, min_confidence: float, wanted: list[str]) -> list[Candidate]:
    """The fixes of the hypotheses present; with `--fix`, only those ids (`ID`), or that exact change
    (`ID:NAME=VALUE`) tried against every present kind that lists the id (else the top one)."""
    present = [h for h in report.hypotheses if h.confidence >= min_confidence]
    listed = [
        Candidate(h.kind.value, f["id"], dict(f["params"]), f["text"], h.origin.step or 0)
        for h in present
        for f in h.fixes
        if f.get("id") in fixspec.FIXES
    ]
    if not wanted:
        return _unique(listed)
    out: list[Candidate] = []
    for text in wanted:
        fix_id, params = fixspec.parse(text)
        same = [c for c in listed if c.fix_id == fix_id]
        if ":" not in text and same:
            out += same
            continue
        kinds = list(dict.fromkeys((c.kind, c.onset) for c in same)) or [
            (h.kind.value, h.origin.step or 0) for h in present[:1]
        ]
        made = fixspec.fix(fix_id, **params)
        out += [Candidate(kind, fix_id, made["params"], made["text"], onset) for kind, onset in kinds]
    return _unique(out)


def _unique(cands: list[Candidate]) -> list[Candidate]:
    seen: dict[tuple[str, str], Candidate] = {}
    for c in cands:
        seen.setdefault((c.kind, c.spec), c)
    return list(seen.values())


# kind -> (threshold, multiple): the losses a loss state needs before the monitor recognises it; its onset is
# dated back to the start of that stretch, so a trial must run past onset + that many steps to show it
RECOGNISED_AFTER = {"loss_plateau": ("plateau_min_losses", 1), "unstable_loss": ("loss_window", 2)}


def default_steps(cands: list[Candidate], thresholds: dict[str, Any]) -> int:
    """Past the latest point a symptom can be recognised, with margin: 1.5 × (onset + the losses its state needs
    first) + 20, at most STEPS_CAP. `thresholds`: those the run was observed with."""
    return min(
        STEPS_CAP,
        max(max(int(1.5 * (c.onset + _recognised_after(c.kind, thresholds))) + 20, _by_share(c)) for c in cands),
    )


def _by_share(c: Candidate) -> int:
    """An lr that collapsed counts only within the first loop.EARLY of a run: the control must run long enough
    for its onset to lie there (and at least loop.MIN_RUN steps)."""
    if c.fix_id != "scheduler_per_epoch":
        return 0
    return max(loop.MIN_RUN, math.ceil(c.onset / loop.EARLY)) + 20


def _recognised_after(kind: str, thresholds: dict[str, Any]) -> int:
    name, times = RECOGNISED_AFTER.get(kind, ("", 0))
    if not name:
        return 0
    value = thresholds.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        value = Thresholds.model_fields[name].default
    return times * int(value)


def make_plan(
    run_dir: Path, steps: int | None, seeds: int | None, wanted: list[str], timeout: float | None, min_conf: float
) -> Plan | str:
    """The trials to run, or why there is nothing to verify (a sentence)."""
    if steps is not None and steps < 1:
        raise NeuraldbgError("neuraldbg: --steps must be at least 1")
    if seeds is not None and not 1 <= seeds <= 100:
        raise NeuraldbgError("neuraldbg: --seeds must be between 1 and 100")
    cmd, meta, report = load_command(run_dir)
    cands = candidates(report, min_conf, wanted)
    if not any(h.confidence >= min_conf for h in report.hypotheses):
        return f"nothing to verify: {run_dir} shows no problem at confidence >= {min_conf:g}"
    if not cands:
        return "nothing to verify: no problem found has a fix neuraldbg can apply from outside the script"
    n = steps or default_steps(cands, cmd.thresholds)
    wall: float = _field(meta, "wall_s", (int, float), 10.0)
    observed: int = _field(meta, "steps_observed", int, 0)
    per_trial = START_S + float(wall) * min(1.0, n / max(1, observed))
    seed_list: list[int | None] = [None] if seeds is None else list(range(1, seeds + 1))
    limit = timeout if timeout is not None else max(120.0, 10 * per_trial)
    original_ok = meta.get("status") in ("finished", "stopped")
    plan = Plan(Path(run_dir).absolute(), cmd, cands, n, seed_list, limit, per_trial, original_ok)
    plan.observed, plan.wall_s = observed, float(wall)
    plan.no_overlay = overlay.available()
    plan.steps_given = steps is not None
    return plan


def execute(plan: Plan, min_conf: float, say: Any = print) -> tuple[dict[str, Any], bool]:
    """Run the control and every fix on every seed, one at a time; (verify.json's document, interrupted)."""
    shutil.rmtree(plan.run_dir / TRIALS_DIR, ignore_errors=True)
    runs = [(spec, seed) for seed in plan.seeds for spec in [None, *plan.specs]]
    say(
        f"neuraldbg verify: {len(runs)} trials (control + {len(plan.specs)} fix(es), {len(plan.seeds)} seed(s)) "
        f"of {plan.steps} steps each, about {plan.estimate_s * len(runs):.0f} s; {isolation_line(plan)}"
    )
    done: dict[tuple[str | None, int | None], Outcome] = {}
    interrupted = _trials(plan, runs, done, min_conf, say)
    fixes = [judge(c, plan, done, min_conf) for c in plan.candidates]
    extended = None
    if not interrupted:
        extended, interrupted = _longer(plan, fixes, min_conf, say)
    # by status, and the verified by effect: the best proven cure first
    fixes.sort(key=lambda f: (ORDER.get(f["status"], len(ORDER)), -effect(f["metric"]), _level(f["metric"])))
    control: dict[str, Any] = {"runs": [done[(None, s)].doc() for s in plan.seeds if (None, s) in done]}
    bugs = [control_bug(o) for s in plan.seeds if (o := done.get((None, s))) and o.state != "ok"]
    if bugs and plan.original_ok:
        control["verify_bug"] = bugs[0]
    doc = {"schema": SCHEMA, "steps": plan.steps, "seeds": len(plan.seeds), "control": control, "fixes": fixes}
    if extended:
        doc["extended"] = extended
    if interrupted:
        doc["interrupted"] = True
    return doc, interrupted


def _trials(
    plan: Plan,
    runs: list[tuple[str | None, int | None]],
    done: dict[tuple[str | None, int | None], Outcome],
    min_conf: float,
    say: Any,
) -> bool:
    """Run `runs` (spec, seed) one at a time into `done`; True when Ctrl-C stopped them."""
    for i, (spec, seed) in enumerate(runs, 1):
        out = Outcome(spec or "control", seed, plan.trial_dir(spec, seed))
        try:
            run_one(plan.cmd, out, spec, plan.steps, plan.timeout, isolate=not plan.no_overlay)
            done[(spec, seed)] = read_outcome(out, min_conf)
            say(f"  [{i}/{len(runs)}] {progress_line(out)}")
            if spec is None and out.state != "ok" and plan.original_ok:
                stderr(f"neuraldbg: {control_bug(out)}")
        except KeyboardInterrupt:  # the trial's process group is gone (run_one kills it on the way out)
            done.pop((spec, seed), None)
            say(f"  [{i}/{len(runs)}] {out.name}: interrupted; verify stops with the results so far")
            return True
    return False


def _longer(plan: Plan, fixes: list[dict[str, Any]], min_conf: float, say: Any) -> tuple[dict[str, Any] | None, bool]:
    """Judged again on a control and trials run longer, once, unless --steps fixed the length: fixes still
    catching up at the end of their trials (a slower start: see _catching_up), twice as long (at most STEPS_CAP);
    and fixes whose control did not show the symptom yet, as long as the original run (replay_steps): a
    hypothesis's confidence can rest on what came later in the run (the plateau that makes a statistic harmful,
    the level a divergence settles at). Their entries in `fixes` are replaced; returns what was run again
    (verify.json's "extended") and whether Ctrl-C stopped it."""
    if plan.steps_given:
        return None, False
    slow = [c for c, f in zip(plan.candidates, fixes) if f["status"] == "inconclusive" and RUN_LONGER in f["reason"]]
    replay = replay_steps(plan)
    unseen = [c for c, f in zip(plan.candidates, fixes) if f["reason"].startswith(NOT_SHOWN)] if replay else []
    longer = max(min(STEPS_CAP, 2 * plan.steps) if slow else 0, replay if unseen else 0)
    again_for = slow + [c for c in unseen if c not in slow]
    if not again_for or longer <= plan.steps:
        return None, False
    again = dataclasses.replace(plan, candidates=again_for, steps=longer, label=f"steps{longer}")
    runs = [(spec, seed) for seed in again.seeds for spec in [None, *again.specs]]
    why = []
    if slow:
        why.append(f"still catching up at step {plan.steps}: {', '.join(dict.fromkeys(c.spec for c in slow))}")
    if unseen:
        kinds = ", ".join(dict.fromkeys(c.kind for c in unseen))
        why.append(f"the control did not show {kinds} by step {plan.steps} (the original run: {plan.observed} steps)")
    say(f"  {'; '.join(why)}; the control and them again, {longer} steps")
    done: dict[tuple[str | None, int | None], Outcome] = {}
    interrupted = _trials(again, runs, done, min_conf, say)
    for i, c in enumerate(plan.candidates):
        if c in again_for and not interrupted:
            before = "it was still catching up" if c in slow else f"the control did not show {c.kind} yet"
            entry = judge(c, again, done, min_conf)
            entry["reason"] = f"judged at {longer} steps (at {plan.steps} {before}); {entry['reason']}"
            fixes[i] = entry
    return {"steps": longer, "fixes": again.specs}, interrupted


def replay_steps(plan: Plan) -> int:
    """How long a control runs to replay the original run: its length, when that fits in REPLAY_S of training
    at the original run's pace, else what does (at least STEPS_CAP); 0 when the trials already ran that long."""
    if plan.observed <= plan.steps:
        return 0
    per_step = plan.wall_s / max(1, plan.observed)
    affordable = int(REPLAY_S / per_step) if per_step > 0 else plan.observed
    steps = min(plan.observed, max(STEPS_CAP, affordable))
    return steps if steps > plan.steps else 0


def isolation_line(plan: Plan) -> str:
    """How the user's files are kept from the trials, in words."""
    if not plan.no_overlay:
        return f"isolation: overlay (a copy-on-write view of {plan.cmd.cwd})"
    return f"isolation: guard (Python's file functions redirected; no overlay: {plan.no_overlay})"


def control_bug(out: Outcome) -> str:
    """A control that fails where the recorded run finished: verify's own fault, with the script's last line."""
    seed = "" if out.seed is None else f" on seed {out.seed}"
    return (
        f"the control {out.state}{seed} where the original run finished: a bug of neuraldbg verify "
        f"(isolation: {out.isolation or 'unknown'}), please report it; {out.error}"
    )


def progress_line(out: Outcome) -> str:
    seed = "" if out.seed is None else f" (seed {out.seed})"
    how = f", isolation: {out.isolation}" if out.isolation else ""
    how += f" (no overlay: {out.overlay_failed})" if out.overlay_failed else ""
    if out.state != "ok":
        return f"{out.name}{seed}: {out.state}: {out.error} ({out.wall_s:.1f} s{how})"
    kinds = ", ".join(out.kinds) or "no problem"
    return f"{out.name}{seed}: {out.steps} steps, loss {_fmt(out.loss)}, {kinds} ({out.wall_s:.1f} s{how})"


RUN_LONGER = "run longer to judge it"  # in a catching-up verdict's reason: verify runs it again, longer
NOT_SHOWN = "the control did not show"  # a control without the targeted symptom: run again as long as the original
MIN_EFFECT = 0.05  # the smallest change of the loss's level that counts, as a share of the control's (one seed)
ORDER = {"verified": 0, "partial": 1, "not_verified": 2, "worse": 3, "inconclusive": 4}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs and all(map(math.isfinite, xs)) else None


def addressed(kind: str, causes: dict[str, str], kinds: dict[str, float]) -> set[str]:
    """What a fix for `kind` is meant to cure in the control: its root (following 'likely a consequence of') and
    every problem that root explains, `kind` included."""

    def root_of(k: str) -> str:
        trail = {k}
        while k in causes and causes[k] not in trail:
            k = causes[k]
            trail.add(k)
        return k

    root = root_of(kind)
    return {k for k in kinds if root_of(k) == root} | {kind}


def margin(controls: list[float]) -> float:
    """How far the loss's level must move to count: MIN_EFFECT of the control's, or the spread of the control
    between seeds when that is larger (a change inside seed noise is no effect)."""
    finite = [abs(x) for x in controls if math.isfinite(x)]
    if not finite:
        return math.inf
    spread = max(controls) - min(controls) if len(controls) > 1 and len(finite) == len(controls) else 0.0
    return max(MIN_EFFECT * sum(finite) / len(finite), spread, 1e-12)


def seed_verdict(
    kind: str, ctl: Outcome, tri: Outcome, need: float, on: str, needs: dict[str, float] | None = None
) -> tuple[str, str]:
    """(status, why) of one seed: worse (the loss's level rose beyond `need`, or turned non-finite); not
    verified (the symptom stays, a new problem appears, or the loss did not move beyond `need`); partial (the
    symptom went, problems the fix was meant to cure remain: its root, that root's other consequences);
    verified. A run with several objectives (`needs`: each one's margin) is judged on each (objectives_verdict)."""
    if needs:
        return objectives_verdict(kind, ctl, tri, needs, on)
    a, b = tri.late, ctl.late
    moved = f"{_fmt(b)} → {_fmt(a)}"
    if math.isfinite(b) and not math.isfinite(a):
        return "worse", f"the loss turned non-finite{on} (control {_fmt(b)})"
    if math.isfinite(a) and math.isfinite(b) and a > b + need:
        catching = _catching_up(kind, ctl, tri)
        if catching:
            return "inconclusive", f"the loss is higher{on} ({moved}) but {catching}"
        return "worse", f"the loss got worse{on}: {moved}"
    if kind in tri.kinds:
        return "not_verified", f"{kind} still present{on} (confidence {tri.kinds[kind]:.2f}; loss {moved})"
    new = sorted(set(tri.kinds) - set(ctl.kinds))
    if new:
        return "not_verified", f"{', '.join(new)} appeared{on} (loss {moved})"
    remain = sorted((addressed(kind, ctl.causes, ctl.kinds) - {kind}) & set(tri.kinds))
    if remain:
        return "partial", f"{kind} gone{on}, but {', '.join(remain)} remain (loss {moved})"
    improved = math.isfinite(a) and (not math.isfinite(b) or b - a > need)  # a finite loss beats a NaN
    if not improved:
        catching = _catching_up(kind, ctl, tri, need) if math.isfinite(a) and math.isfinite(b) else ""
        if catching:
            return "inconclusive", f"{kind} gone{on}, the loss not yet beyond noise ({moved}), but {catching}"
        return "not_verified", f"{kind} gone{on}, but the loss did not improve beyond noise ({moved})"
    return "verified", ""


def _catching_up(kind: str, ctl: Outcome, tri: Outcome, need: float = 0.0) -> str:
    """A trial whose loss is still above the control's at the end (or not yet `need` below it), but without
    the targeted symptom or a new problem, below where it started and still falling faster than the
    control's: a slower start (a lower lr, re-initialised layers), not a worse run (one that blew up and falls
    back from its peak is worse), when at the two falls' difference it gets `need` below the control's level
    within as many steps again. Says how fast each falls (empty: it does not catch up)."""
    if kind in tri.kinds or set(tri.kinds) - set(ctl.kinds):
        return ""
    if not (math.isfinite(tri.fall) and tri.fall > 0 and math.isfinite(ctl.fall)):
        return ""
    if not (math.isfinite(tri.first) and tri.late < tri.first):  # above where it started: a blow-up, not a slow start
        return ""
    gain, gap = tri.fall - max(ctl.fall, 0.0), tri.late - (ctl.late - need)
    if gain <= 0 or gap / gain > max(tri.steps, 1):
        return ""
    where = "passes the control" if not need else "gets beyond noise below the control"
    return (
        f"{kind} is gone and it still falls {tri.fall:.3g} per step where the control's falls {max(ctl.fall, 0):.3g}: "
        f"at that pace it {where} within {math.ceil(gap / gain)} more steps; "
        f"{RUN_LONGER} (--steps {2 * max(tri.steps, 1)})"
    )


def objectives_verdict(kind: str, ctl: Outcome, tri: Outcome, needs: dict[str, float], on: str) -> tuple[str, str]:
    """Several models trained against or beside each other (a GAN, actor and critic): each objective against its
    own control level. A gain in one paid for by another (a generator's loss falling as the discriminator's
    rises) is no evidence of a cure: worse when one objective turned non-finite or rose beyond its noise and none
    fell; verified only when none rose, one fell beyond its noise and the problems are gone as for one loss."""
    moved = "; ".join(
        f"{name} {_fmt(ctl.objectives[name])} → {_fmt(tri.objectives.get(name, math.nan))}" for name in needs
    )
    rose, fell = [], []
    for name, need in needs.items():
        a, b = tri.objectives.get(name, math.nan), ctl.objectives[name]
        if math.isfinite(b) and not math.isfinite(a):
            return "worse", f"the {name} loss turned non-finite{on} ({moved})"
        if math.isfinite(a) and math.isfinite(b):
            rose += [name] if a > b + need else []
            fell += [name] if b - a > need else []
        elif math.isfinite(a):  # a finite level beats a NaN
            fell.append(name)
    if rose and not fell:
        return "worse", f"the {' and '.join(rose)} loss{'es' if len(rose) > 1 else ''} got worse{on} ({moved})"
    if kind in tri.kinds:
        return "not_verified", f"{kind} still present{on} (confidence {tri.kinds[kind]:.2f}; {moved})"
    new = sorted(set(tri.kinds) - set(ctl.kinds))
    if new:
        return "not_verified", f"{', '.join(new)} appeared{on} ({moved})"
    remain = sorted((addressed(kind, ctl.causes, ctl.kinds) - {kind}) & set(tri.kinds))
    if remain:
        return "partial", f"{kind} gone{on}, but {', '.join(remain)} remain ({moved})"
    if rose:
        return (
            "not_verified",
            f"{kind} gone{on}, but the objectives moved apart: {', '.join(fell)} better, {', '.join(rose)} worse ({moved})",
        )
    if not fell:
        return "not_verified", f"{kind} gone{on}, but no objective improved beyond noise ({moved})"
    return "verified", ""


def objective_margins(pairs: list[tuple[Outcome, Outcome, str]]) -> dict[str, float]:
    """Each objective's margin over the seeds, for the objectives every control and trial reports; empty when
    the run has one objective (or they do not all report the same)."""
    names = None
    for ctl, tri, _ in pairs:
        common = set(ctl.objectives) & set(tri.objectives)
        names = common if names is None else names & common
    if not names or len(names) < 2:
        return {}
    return {name: margin([ctl.objectives[name] for ctl, _, _ in pairs]) for name in sorted(names)}


def judge(c: Candidate, plan: Plan, done: dict[tuple[str | None, int | None], Outcome], min_conf: float) -> dict:
    """A run-level verdict on every seed (seed_verdict): verified only when the targeted symptom and everything
    its root explains are gone, nothing new appears and the loss's level improved beyond seed noise; the worst
    seed decides. Inconclusive: a control without the symptom, a crash, a fix that did not apply."""
    entry: dict[str, Any] = {"kind": c.kind, "id": c.fix_id, "params": c.params, "text": c.text}
    inconclusive = ""
    pairs: list[tuple[Outcome, Outcome, str]] = []
    for seed in plan.seeds:
        on = "" if seed is None else f" on seed {seed}"
        ctl, tri = done.get((None, seed)), done.get((c.spec, seed))
        if ctl is None or tri is None:
            inconclusive = "not run (verify was interrupted)"
        elif ctl.state != "ok":
            inconclusive = f"the control {ctl.state}{on}: {ctl.error}"
            if plan.original_ok:
                inconclusive += " (the original run did not: a problem of verify itself, please report it)"
        elif c.kind not in ctl.kinds:
            inconclusive = f"{NOT_SHOWN} {c.kind} within {ctl.steps} steps{on}"
        elif tri.state != "ok":
            inconclusive = f"the trial {tri.state}{on}: {tri.error}"
        elif tri.fix.get("error"):
            inconclusive = f"the fix failed{on}: {tri.fix['error']}"
        elif not tri.fix.get("applied"):
            inconclusive = f"not applicable{on}: {tri.fix.get('skipped') or 'not applied'}"
        if inconclusive:
            break
        assert ctl is not None and tri is not None
        pairs.append((ctl, tri, on))
    need = margin([ctl.late for ctl, _, _ in pairs])
    needs = objective_margins(pairs)
    verdicts = [seed_verdict(c.kind, ctl, tri, need, on, needs) for ctl, tri, on in pairs]
    wins = sum(1 for status, _ in verdicts if status == "verified")
    trial_loss, control_loss = _mean([t.late for _, t, _ in pairs]), _mean([k.late for k, _, _ in pairs])
    n = len(plan.seeds)
    at = min((t.steps for _, t, _ in pairs), default=0)
    numbers = (
        f"{wins}/{n} seeds: loss {_fmt(trial_loss)} vs {_fmt(control_loss)} (mean of the last {LATE} losses) at step "
        f"{at}" + (f", counted beyond {_fmt(need)}" if math.isfinite(need) else "")
    )
    if needs:
        numbers += "; each objective: " + ", ".join(
            f"{name} {_fmt(_mean([t.objectives[name] for _, t, _ in pairs]))} vs "
            f"{_fmt(_mean([k.objectives[name] for k, _, _ in pairs]))}"
            for name in needs
        )
    if inconclusive:
        status, reason = "inconclusive", inconclusive
    else:
        status = max((v for v, _ in verdicts), key=ORDER.__getitem__, default="verified")
        if status in ("verified",):
            reason = numbers
        else:  # the worst seed says why
            reason = f"{next(w for v, w in verdicts if v == status)}; {numbers}"
    metric: dict[str, Any] = {"control": control_loss, "trial": trial_loss}
    if needs:  # each objective's level, control and trial (means over the seeds)
        metric["objectives"] = {
            name: {
                "control": _mean([k.objectives[name] for k, _, _ in pairs]),
                "trial": _mean([t.objectives[name] for _, t, _ in pairs]),
            }
            for name in needs
        }
    entry.update(status=status, wins=wins, seeds=n, metric=metric)
    entry["reason"] = reason
    ran = [o.isolation for s in plan.seeds if (o := done.get((c.spec, s))) and o.isolation]
    entry["isolation"] = ", ".join(dict.fromkeys(ran)) or None
    return entry


def effect(metric: dict[str, Any]) -> float:
    """How much a trial lowered the loss's level, as a share of the control's (0 when unknown)."""
    ctl, tri = metric.get("control"), metric.get("trial")
    return (ctl - tri) / abs(ctl) if isinstance(ctl, float) and isinstance(tri, float) and ctl else 0.0


def _level(metric: dict[str, Any]) -> float:
    """The trial's loss level, lowest first among equal effects (against a control that went NaN, say)."""
    tri = metric.get("trial")
    return tri if isinstance(tri, float) else math.inf


def _fmt(x: float | None) -> str:
    return "NaN/Inf" if x is None or not math.isfinite(x) else f"{x:.4g}"


def write(run_dir: Path, doc: dict[str, Any]) -> Path:
    path = Path(run_dir) / VERIFY_FILE
    tmp = path.with_name(f".{VERIFY_FILE}.tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    tmp.replace(path)
    return path


def summary_lines(doc: dict[str, Any]) -> list[str]:
    return [
        f"  {fixspec.MARKS[f['status']]:<15} {fixspec.spec(f['id'], f['params'])} for {f['kind']}: {f['reason']}"
        for f in doc["fixes"]
    ]


def stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
