"""Principles behind the quiet verdicts on other domains (issue 18), on hand-made step records: weights whose
optimizer rests are not stuck; a factor that starts at zero by construction does not 'explode' as it grows."""
from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.trace.events import GradStats, ModelInfo, ModuleInfo, StepRecord

TH = Thresholds()
OWNERS = (("G", "a"), ("G", "b"))  # one optimizer's parameter owners, as the probe hands them over


def _monitor(names, in_optimizer=True):
    events = []
    mon = Monitor(TH, events.append)
    mods = {n: ModuleInfo(name=n, type="Linear", params=100, weight_ndim2=True, in_optimizer=in_optimizer)
            for n in names}
    mon.set_models([ModelInfo(name="G", cls="G", modules=mods, order=list(mods))])
    return mon, events


def _weights_run(stepped_every, in_optimizer=True, steps=12):
    """G's two layers get a gradient every step, but move only when their optimizer steps (every k-th step;
    0: never)."""
    mon, events = _monitor(["a", "b"], in_optimizer)
    version = 0
    for step in range(steps):
        stepped = bool(stepped_every) and step % stepped_every == 0
        version += stepped
        rec = StepRecord(step=step, sampled=True, stepped=(OWNERS,) if stepped else ())
        for n in ("a", "b"):
            rec.grads[("G", n)] = GradStats(norm=0.1, numel=100, weight_norm=1.0, checksum=(version,))
        mon.observe(rec)
    mon.finish()
    return [e for e in events if e.to == "unchanged"]


def test_weights_resting_between_their_optimizers_steps_are_not_unchanged():
    assert _weights_run(stepped_every=5) == []  # WGAN's generator: one step per 5 critic steps


def test_weights_whose_optimizer_never_steps_are_unchanged():
    assert {e.module for e in _weights_run(stepped_every=0)} == {"a", "b"}


def test_weights_outside_any_optimizer_are_unchanged_whatever_else_steps():
    assert {e.module for e in _weights_run(stepped_every=5, in_optimizer=False)} == {"a", "b"}


def test_weights_found_unchanged_between_sparse_samples_are_dated_from_the_step_after_the_earlier():
    """Sampled every 10th step: weights bit-identical at 30 and 40 took no update from step 31 (a backbone unfrozen
    at 25 and first read at 30). Between samples the family holds back what comes after the last one, so the
    events still come out in step order."""
    from neuraldbg_cli.reason.families.weights import WeightObserver

    mon, events = _monitor(["a", "b"], in_optimizer=False)
    (weights,) = [o for o in mon.observers if isinstance(o, WeightObserver)]
    for step in range(80):
        sampled = step % 10 == 0
        rec = StepRecord(step=step, sampled=sampled, stepped=(OWNERS,))
        if sampled and step >= 30:
            for n in ("a", "b"):
                rec.grads[("G", n)] = GradStats(norm=0.1, numel=100, weight_norm=1.0, checksum=(7,))
        mon.observe(rec)
        if step == 35:
            assert weights.floor(35) == 31
    mon.finish()
    unchanged = [e for e in events if e.to == "unchanged"]
    assert {e.module for e in unchanged} == {"a", "b"} and {e.step for e in unchanged} == {31}, unchanged


def test_a_gradient_growing_from_zero_by_construction_is_not_exploding():
    """LoRA: A's gradient is 0, then ~1e-6 while B is ~0, then grows to its model's scale."""
    mon, events = _monitor([f"l{i}" for i in range(4)] + ["lora_A"])
    for step in range(40):
        rec = StepRecord(step=step, sampled=True)
        for i in range(4):
            rec.grads[("G", f"l{i}")] = GradStats(norm=0.01 * 10, numel=100)  # rms 0.01
        rec.grads[("G", "lora_A")] = GradStats(norm=min(0.005, 1e-7 * 2.0 ** step) * 10, numel=100)
        mon.observe(rec)
    mon.finish()
    assert [e for e in events if e.to == "exploding"] == []


def test_a_layer_that_explodes_from_its_own_scale_still_does():
    mon, events = _monitor([f"l{i}" for i in range(4)])
    for step in range(20):
        rec = StepRecord(step=step, sampled=True)
        for i in range(4):
            rms = 0.01 if step < 10 or i else 0.01 * 10.0 ** (step - 9)
            rec.grads[("G", f"l{i}")] = GradStats(norm=rms * 10, numel=100)
        mon.observe(rec)
    mon.finish()
    assert {e.module for e in events if e.to == "exploding"} == {"l0"}
