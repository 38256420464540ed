"""verify's run-level verdict per trial (issue 32), on hand-made outcomes: verified only when the targeted
symptom and every problem its root explains are gone, nothing new appears and the loss's level improved beyond
seed noise; partial, not verified, worse and inconclusive say what happened instead."""

from __future__ import annotations

import math
from pathlib import Path

from neuraldbg_cli.verify.runner import Candidate, Plan, addressed, effect, judge, margin
from neuraldbg_cli.verify.trialrun import Command, Outcome

CMD = Command(argv=["train.py"], mode="script", cwd=".", env={}, python="python", every=None, thresholds={})


def out(name, seed, late, kinds=(), causes=None, state="ok", steps=60, **pace):
    """An outcome; `pace`: its `fall` per step and `first` loss level, for the catching-up rule."""
    o = Outcome(name, seed, Path("/nonexistent"), state=state, steps=steps, loss=late, late=late)
    for k, v in pace.items():
        setattr(o, k, v)
    o.kinds = {k: 0.8 for k in kinds}
    o.causes = dict(causes or {})
    o.fix = {"applied": True}
    return o


def verdict(c, controls, trials, original_ok=True):
    seeds = [None] if len(controls) == 1 else list(range(1, len(controls) + 1))
    plan = Plan(Path("/run"), CMD, [c], 60, seeds, 60.0, 1.0, original_ok)
    done = {}
    for seed, ctl, tri in zip(seeds, controls, trials):
        done[(None, seed)], done[(c.spec, seed)] = ctl, tri
    return judge(c, plan, done, 0.5)


CLIP = Candidate("exploding_gradient", "clip_grad_norm", {"max_norm": 1.0}, "clip gradients")
SIGN = {"exploding_gradient": "loss_divergence", "loss_divergence": "loss_misuse"}


def test_a_symptom_gone_while_its_root_remains_is_partial_not_verified():
    # a VAE whose KL term has the wrong sign: clipping removes the explosion, the loss falls even further
    ctl = out("control", None, -1.7e8, ["loss_misuse", "loss_divergence", "exploding_gradient"], SIGN)
    tri = out("clip", None, -5.0e9, ["loss_misuse", "loss_divergence"], {"loss_divergence": "loss_misuse"})
    v = verdict(CLIP, [ctl], [tri])
    assert v["status"] == "partial" and "loss_divergence, loss_misuse remain" in v["reason"], v
    assert addressed("exploding_gradient", SIGN, ctl.kinds) == {"loss_misuse", "loss_divergence", "exploding_gradient"}


def test_a_change_inside_seed_noise_is_no_effect_and_a_real_cure_is_verified():
    wd = Candidate("loss_divergence", "clip_grad_norm", {"max_norm": 1.0}, "clip gradients")
    controls = [out("control", s, v, ["loss_divergence"]) for s, v in ((1, 6.674), (2, 6.60))]
    same = [out("clip", s, v) for s, v in ((1, 6.662), (2, 6.61))]
    v = verdict(wd, controls, same)
    assert v["status"] == "not_verified" and "did not improve beyond noise" in v["reason"], v
    cured = [out("clip", s, v) for s, v in ((1, 0.64), (2, 0.66))]
    v = verdict(wd, controls, cured)
    assert v["status"] == "verified" and v["wins"] == 2 and effect(v["metric"]) > 0.8, v
    assert margin([6.674, 6.60]) >= 0.05 * 6.6  # at least 5% of the control's level, or the seeds' spread


def test_worse_better_not_cured_new_problems_and_a_finite_loss_beating_a_nan():
    lr = Candidate("unstable_loss", "lr_scale", {"factor": 0.1}, "lower the lr")
    ctl = out("control", None, 1.36, ["unstable_loss"])
    assert verdict(lr, [ctl], [out("t", None, 3.0)])["status"] == "worse"
    assert verdict(lr, [ctl], [out("t", None, math.nan)])["status"] == "worse"
    still = verdict(lr, [ctl], [out("t", None, 0.48, ["unstable_loss"])])
    assert still["status"] == "not_verified" and "still present" in still["reason"] and "1.36 → 0.48" in still["reason"]
    new = verdict(lr, [ctl], [out("t", None, 0.48, ["loss_plateau"])])
    assert new["status"] == "not_verified" and "loss_plateau appeared" in new["reason"], new
    nan = out("control", None, math.nan, ["unstable_loss"])
    assert verdict(lr, [nan], [out("t", None, 0.5)])["status"] == "verified"


def test_a_crashed_control_of_a_run_that_finished_is_verifys_own_problem():
    lr = Candidate("unstable_loss", "lr_scale", {"factor": 0.1}, "lower the lr")
    ctl = out("control", None, math.nan, state="crashed")
    ctl.error = "shutil.SameFileError"
    v = verdict(lr, [ctl], [out("t", None, 0.5)])
    assert v["status"] == "inconclusive" and "a problem of verify itself" in v["reason"], v
    assert "verify itself" not in verdict(lr, [ctl], [out("t", None, 0.5)], original_ok=False)["reason"]


LR = Candidate("unstable_loss", "lr_scale", {"factor": 0.1}, "lower the learning rate")


def two(name, seed, g, d, kinds=()):
    o = out(name, seed, g, kinds)
    o.objectives = {"G": g, "D": d}
    return o


def test_several_objectives_are_each_judged_against_their_own_control():
    """A GAN (issue 32, item 3): the generator's loss falling while the discriminator's rises is no cure; both
    falling (or one within noise) is; one of them turning NaN is worse; the report gives each objective."""
    ctl = two("control", None, 1.36, 0.50, ["unstable_loss"])
    traded = verdict(LR, [ctl], [two("lr", None, 0.48, 1.20)])
    assert traded["status"] == "not_verified" and "moved apart" in traded["reason"]
    assert traded["metric"]["objectives"] == {
        "G": {"control": 1.36, "trial": 0.48},
        "D": {"control": 0.5, "trial": 1.2},
    }
    cured = verdict(LR, [ctl], [two("lr", None, 0.48, 0.49)])
    assert cured["status"] == "verified" and "each objective: D 0.49 vs 0.5, G 0.48 vs 1.36" in cured["reason"]
    lost = verdict(LR, [ctl], [two("lr", None, 0.40, math.nan)])
    assert lost["status"] == "worse" and "the D loss turned non-finite" in lost["reason"]
    both_up = verdict(LR, [ctl], [two("lr", None, 2.0, 0.9)])
    assert both_up["status"] == "worse" and "the D and G losses got worse" in both_up["reason"]
    still = verdict(LR, [ctl], [two("lr", None, 0.48, 0.49, ["unstable_loss"])])
    assert still["status"] == "not_verified" and "unstable_loss still present" in still["reason"]


def test_objective_levels_from_stats_rows():
    from neuraldbg_cli.verify.trialrun import LATE, objective_levels

    rows = [{"step": i, "loss": 1.0, "losses": {"G": float(i), "D": 1.0}} for i in range(30)]
    levels = objective_levels(rows)
    assert levels["D"] == 1.0 and levels["G"] == sum(range(30 - LATE, 30)) / LATE
    assert objective_levels([{"step": 0, "loss": 1.0}]) == {}  # one objective: judged as before


def test_a_slower_start_that_is_still_catching_up_is_inconclusive_not_worse():
    """A 50x lower lr against dead ReLUs: after 24 steps its loss is still above the control's (1.735 vs 1.625),
    but the dead units are gone and it falls 0.027 per step where the control's falls 0.010: it would pass within
    7 steps, so it is not called worse; the reason says to run longer. One that stalls above the control, or
    keeps the symptom, is worse."""
    lr = Candidate("dead_activation", "lr_scale", {"factor": 0.02}, "lower the lr")
    ctl = out("control", None, 1.625, ["dead_activation"], fall=0.010)
    v = verdict(lr, [ctl], [out("lr", None, 1.735, steps=24, fall=0.027, first=2.3)])
    assert v["status"] == "inconclusive" and "still falls 0.027 per step" in v["reason"], v
    assert "passes the control within 7 more steps" in v["reason"] and "--steps 48" in v["reason"], v
    assert verdict(lr, [ctl], [out("lr", None, 1.735, fall=0.0)])["status"] == "worse"  # stalled
    kept = out("lr", None, 1.735, ["dead_activation"], fall=0.027, first=2.3)
    assert verdict(lr, [ctl], [kept])["status"] == "worse"
    blown = out("lr", None, 426.0, fall=7.8, first=1.9)  # blew up, falling back from its peak: far above its start
    assert verdict(lr, [ctl], [blown])["status"] == "worse"


def test_a_cure_not_yet_beyond_noise_but_falling_faster_is_run_longer():
    """A 10x lower lr against dead ReLUs at 24 steps: the dead units are gone and the loss is below the control's,
    but not by the margin (1.567 vs 1.625, margin 0.081); it falls 0.03 per step where the control's falls 0.01, so
    it gets beyond the margin within a few steps: inconclusive with 'run longer', not 'not verified'. One that
    falls no faster than the control is not verified."""
    lr = Candidate("dead_activation", "lr_scale", {"factor": 0.1}, "lower the lr")
    ctl = out("control", None, 1.625, ["dead_activation"], fall=0.010)
    v = verdict(lr, [ctl], [out("lr", None, 1.567, steps=24, fall=0.030, first=2.3)])
    assert v["status"] == "inconclusive" and "the loss not yet beyond noise (1.625 → 1.567)" in v["reason"], v
    assert "gets beyond noise below the control within 2 more steps" in v["reason"] and "--steps 48" in v["reason"]
    v = verdict(lr, [ctl], [out("lr", None, 1.567, steps=24, fall=0.005, first=2.3)])
    assert v["status"] == "not_verified" and "did not improve beyond noise" in v["reason"], v


def test_a_slow_start_is_run_again_longer_and_judged_there(monkeypatch, tmp_path):
    """verify does not stop at 'run longer': a fix still catching up at the end of its trial is run again with a
    control, twice as long, and judged there (verify.json's "extended" says so); with --steps it is not."""
    from neuraldbg_cli.verify import runner

    def fake_run(cmd, out, spec, steps, timeout, isolate):
        out.steps = steps

    def fake_read(out, min_conf):  # the control stalls with dead units; the fix starts slower, then passes it
        long = out.steps > 24
        if out.name == "control":
            out.late, out.fall, out.kinds = (1.5 if long else 1.625), 0.01, {"dead_activation": 0.8}
        else:
            out.late, out.fall, out.kinds = (0.9 if long else 1.735), 0.027, {}
        out.first, out.loss, out.fix = 2.3, out.late, {"applied": 1}
        return out

    monkeypatch.setattr(runner, "run_one", fake_run)
    monkeypatch.setattr(runner, "read_outcome", fake_read)
    lr = Candidate("dead_activation", "lr_scale", {"factor": 0.02}, "lower the lr")
    lines = []
    doc, interrupted = runner.execute(Plan(tmp_path, CMD, [lr], 24, [None], 60.0, 1.0, True), 0.5, lines.append)
    (entry,) = doc["fixes"]
    assert entry["status"] == "verified" and entry["reason"].startswith("judged at 48 steps"), entry
    assert doc["extended"] == {"steps": 48, "fixes": [lr.spec]} and not interrupted
    assert any("still catching up at step 24" in line for line in lines), lines
    fixed = Plan(tmp_path, CMD, [lr], 24, [None], 60.0, 1.0, True, steps_given=True)
    doc, _ = runner.execute(fixed, 0.5, lines.append)
    assert doc["fixes"][0]["status"] == "inconclusive" and "extended" not in doc


def test_a_control_that_has_not_shown_the_symptom_yet_is_replayed_as_long_as_the_original_run(monkeypatch, tmp_path):
    """A loss state is dated back to where it began (a divergence to the start of its rise) but recognised later:
    a control cut at the default length may not show it. verify then runs the control and that fix again as long
    as the original run (when that fits in REPLAY_S at its pace) and judges them there; with --steps it does not."""
    from neuraldbg_cli.verify import runner

    def fake_run(cmd, out, spec, steps, timeout, isolate):
        out.steps = steps

    def fake_read(out, min_conf):  # the control's rise is recognised only after step 40
        long = out.steps > 40
        if out.name == "control":
            out.late, out.kinds = (5.4 if long else 0.84), ({"loss_divergence": 0.8} if long else {})
        else:
            out.late, out.kinds = 0.5, {}
        out.first, out.fall, out.loss, out.fix = 0.7, 0.0, out.late, {"applied": 1}
        return out

    monkeypatch.setattr(runner, "run_one", fake_run)
    monkeypatch.setattr(runner, "read_outcome", fake_read)
    fix = Candidate("loss_divergence", "minimize", {}, "remove maximize=True")
    plan = Plan(tmp_path, CMD, [fix], 23, [None], 60.0, 1.0, True, observed=60, wall_s=2.0)
    lines = []
    doc, _ = runner.execute(plan, 0.5, lines.append)
    (entry,) = doc["fixes"]
    assert entry["status"] == "verified", entry
    assert entry["reason"].startswith("judged at 60 steps (at 23 the control did not show loss_divergence yet)")
    assert doc["extended"] == {"steps": 60, "fixes": ["minimize"]}
    assert any("the control did not show loss_divergence by step 23 (the original run: 60 steps)" in x for x in lines)
    # a long, slow original run is replayed as far as REPLAY_S of its training allows (at least STEPS_CAP)
    slow = Plan(tmp_path, CMD, [fix], 23, [None], 60.0, 1.0, True, observed=100_000, wall_s=100_000.0)
    assert runner.replay_steps(slow) == runner.STEPS_CAP
    quick = Plan(tmp_path, CMD, [fix], 23, [None], 60.0, 1.0, True, observed=1000, wall_s=3.0)
    assert runner.replay_steps(quick) == 1000
    given = Plan(tmp_path, CMD, [fix], 23, [None], 60.0, 1.0, True, steps_given=True, observed=60, wall_s=2.0)
    doc, _ = runner.execute(given, 0.5, lines.append)
    assert doc["fixes"][0]["status"] == "inconclusive" and "extended" not in doc
