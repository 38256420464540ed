"""Saturation that began after a normal start and that training kept improving through (an additive attention's
tanh energies pinned at +-1 as a seq2seq decoder grows confident) is kept as a weak hypothesis, below the 0.5
that --fail-on reads; saturation with a stalled loss, or from the first step (the init's scale), is not excused.
Also through the observer: a late saturation's event carries the loss level when it began, the run summary the
level at the end."""
from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.activations import saturated_activation
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.trace.events import ActStats, EventType, SemanticEvent, StepRecord

TH = Thresholds()


def sat(step, module, **metrics):
    base = dict(mean=0.0, std=0.9, min=-1.0, max=1.0, sat_frac=0.8)
    return SemanticEvent(type=EventType.activation_regime_shift.value, step=step, module=module, root="Dec",
                         from_="normal", to="saturated", site="activation", metrics={**base, **metrics})


def summary(**metrics):
    return SemanticEvent(type=EventType.run_summary.value, step=383, module=None, from_="running", to="finished",
                         site="run", metrics={"steps": 384.0, **metrics})


def conf(events):
    hyp = saturated_activation(Context(events=events, thresholds=TH))
    return hyp.confidence if hyp else 0.0


def test_saturation_the_loss_kept_improving_through_is_weak():
    evs = [sat(200, "attention.Ua", baseline_std=0.4, loss_at=1.07), summary(**{"loss_now.Dec": 0.64})]
    hyp = saturated_activation(Context(events=evs, thresholds=TH))
    assert hyp is not None and hyp.confidence < 0.5
    assert "kept improving" in hyp.summary


def test_saturation_with_a_stalled_loss_is_kept():
    assert conf([sat(200, "attention.Ua", baseline_std=0.4, loss_at=1.07), summary(**{"loss_now.Dec": 1.05})]) >= 0.5


def test_saturation_from_the_first_step_is_never_excused():
    # no loss_at: the layer was saturated from its first samples (no normal start)
    assert conf([sat(0, "hidden1"), summary(**{"loss_now.Dec": 0.2})]) >= 0.5


def test_one_stalled_site_keeps_the_hypothesis():
    evs = [sat(200, "attention.Ua", baseline_std=0.4, loss_at=1.07), sat(0, "gru"), summary(**{"loss_now.Dec": 0.6})]
    hyp = saturated_activation(Context(events=evs, thresholds=TH))
    assert hyp.confidence >= 0.5 and hyp.origin.module == "gru"


def _stats(sat11, std):
    return ActStats(n=256.0, mean=0.0, std=std, min=-1.0, max=1.0, zero_frac=0.0, dead_frac=0.0, sat01=0.0,
                    sat11=sat11, nonfinite=0.0)


def test_observer_records_the_loss_level_at_a_late_onset_and_at_the_end():
    """Through the Monitor: normal for 20 steps, then saturated while the loss keeps falling."""
    events = []
    monitor = Monitor(TH, events.append)
    for step in range(40):
        late = step >= 20
        monitor.observe(StepRecord(step=step, sampled=True, losses={"Dec": 2.0 - step * 0.03},
                                   acts={("Dec", "attn", "activation"): _stats(0.9 if late else 0.1,
                                                                              0.9 if late else 0.4)}))
    monitor.finish()
    (ev,) = [e for e in events if e.type == EventType.activation_regime_shift.value and e.to == "saturated"]
    assert ev.step == 20 and abs(ev.metrics["loss_at"] - (2.0 - 15.5 * 0.03)) < 1e-6  # median of the 10 before
    (end,) = [e for e in events if e.type == EventType.run_summary.value]
    assert abs(end.metrics["loss_now.Dec"] - (2.0 - 34.5 * 0.03)) < 1e-6
    hyp = saturated_activation(Context(events=events, thresholds=TH))
    assert hyp is not None and hyp.confidence < 0.5
