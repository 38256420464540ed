"""ReLU units that died after a normal start while the loss kept improving, under steps in scale (an over-wide
layer on easy data: MorvanZhou's 300-unit regression) are a note below the 0.5 that --fail-on reads; units that
died while the loss stalled, under oversized steps (the lr's damage), or from the first step (the init) still
count. Also through the observer: a late death carries the loss level when it happened."""
from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.activations import dead_activation
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.trace.events import ActStats, EventType, SemanticEvent, StepRecord

TH = Thresholds()


def dead(step, module, **metrics):
    base = dict(mean=0.13, std=0.38, min=0.0, max=2.7, zero_frac=0.84, dead_frac=0.71)
    return SemanticEvent(type=EventType.activation_regime_shift.value, step=step, module=module, root="Net",
                         from_="normal", to="dead", site="activation", metrics={**base, **metrics})


def oversized(step):
    return SemanticEvent(type=EventType.parameter_update.value, step=step, module="fc1", root="Net",
                         from_="normal", to="oversized", site="param", metrics={"ratio": 0.6})


def summary(**metrics):
    return SemanticEvent(type=EventType.run_summary.value, step=499, module=None, from_="running", to="finished",
                         site="run", metrics={"steps": 500.0, **metrics})


def hyp_of(events):
    return dead_activation(Context(events=events, thresholds=TH))


def test_units_an_improving_run_left_behind_are_a_note():
    hyp = hyp_of([dead(30, "fc2", baseline_std=0.42, loss_at=0.6), summary(**{"loss_now.Net": 0.21})])
    assert hyp is not None and hyp.confidence < 0.5
    assert "left alive carry the learning" in hyp.summary and "0.6 -> 0.21" in hyp.summary, hyp.summary


def test_units_that_died_while_the_loss_stalled_count():
    hyp = hyp_of([dead(30, "fc2", baseline_std=0.42, loss_at=0.6), summary(**{"loss_now.Net": 0.58})])
    assert hyp is not None and hyp.confidence >= 0.5


def test_units_that_died_once_the_fit_had_converged_are_a_note():
    # MorvanZhou's dropout regression: fc2 died at 0.095, after the loss had fallen from 1.47; the run then
    # reached 0.056 (its best) and ended at 0.09, in the noise of a converged fit on 20 points
    evs = [dead(30, "fc1", baseline_std=0.4, loss_at=0.142), dead(80, "fc2", baseline_std=0.42, loss_at=0.0953),
           summary(**{"loss_now.Net": 0.09, "best_loss": 0.056, "alone": 1.0})]
    hyp = hyp_of(evs)
    assert hyp is not None and hyp.confidence < 0.5, hyp.summary
    # the same deaths, but the run ended above the level it died at (the loss rose after): they count
    evs[-1] = summary(**{"loss_now.Net": 0.13, "best_loss": 0.056, "alone": 1.0})
    assert hyp_of(evs).confidence >= 0.5
    # a best that belongs to another model's loss (a GAN's: several series) says nothing about this one
    evs[-1] = summary(**{"loss_now.Net": 0.09, "best_loss": 0.056, "alone": 0.0})
    assert hyp_of(evs).confidence >= 0.5


def test_units_killed_by_oversized_steps_count_though_the_loss_improved():
    evs = [oversized(2), dead(30, "fc2", baseline_std=0.42, loss_at=0.6), summary(**{"loss_now.Net": 0.21})]
    hyp = hyp_of(evs)
    assert hyp is not None and hyp.confidence >= 0.5


def test_units_dead_from_the_first_step_are_never_excused():
    hyp = hyp_of([dead(0, "fc2"), summary(**{"loss_now.Net": 0.1})])
    assert hyp is not None and hyp.confidence >= 0.5


def _stats(dead_frac):
    return ActStats(n=20.0, mean=0.2, std=0.4, min=0.0, max=2.0, zero_frac=max(dead_frac, 0.5), dead_frac=dead_frac,
                    sat01=0.0, sat11=0.0, nonfinite=0.0)


def test_observer_records_the_loss_level_when_units_died():
    events = []
    monitor = Monitor(TH, events.append)
    for step in range(40):
        monitor.observe(StepRecord(step=step, sampled=True, losses={"Net": 2.0 - step * 0.03},
                                   acts={("Net", "fc2", "activation"): _stats(0.8 if step >= 20 else 0.1)}))
    monitor.finish()
    (ev,) = [e for e in events if e.type == EventType.activation_regime_shift.value and e.to == "dead"]
    assert ev.step == 20 and "loss_at" in ev.metrics
    (end,) = [e for e in events if e.type == EventType.run_summary.value]
    assert end.metrics["loss_now.Net"] < ev.metrics["loss_at"]
    hyp = dead_activation(Context(events=events, thresholds=TH))
    assert hyp is not None and hyp.confidence < 0.5
