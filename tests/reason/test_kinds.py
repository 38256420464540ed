"""One real training script per failure kind, through the real CLI: top hypothesis kind and origin."""
import pytest

CASES = [
    # script, expected top kind, acceptable origin modules (None = not a module)
    ("vanishing.py", "vanishing_gradient", {"layers.0"}),
    ("exploding.py", "exploding_gradient", {"0", "1"}),
    ("dead_relu.py", "dead_activation", {"fc2"}),
    ("saturated.py", "saturated_activation", {"fc1"}),
    ("non_finite.py", "non_finite", {"logf"}),
    ("data_nan.py", "data_anomaly", {None}),
    ("missing_step.py", "unchanged_weights", {"0", "2"}),
    ("detached.py", "no_gradient", {"encoder.0"}),
    ("plateau.py", "loss_plateau", {None}),
    ("divergence.py", "loss_divergence", {None}),
    ("unstable.py", "unstable_loss", {None}),
]


@pytest.mark.parametrize("script,kind,origins", CASES, ids=[c[1] for c in CASES])
def test_top_hypothesis(observe, script, kind, origins):
    obs = observe(script)
    assert obs.proc.returncode == 0, obs.proc.stderr
    top = obs.top
    assert top["kind"] == kind, obs.report["hypotheses"]
    assert top["origin"]["module"] in origins, top
    assert 0.5 <= top["confidence"] <= 1.0
    assert obs.report["status"] == "problems_found"
    assert top["summary"] and top["suggestions"] and top["evidence"]


def test_vanishing_origin_is_input_side_and_propagates(observe):
    top = observe("vanishing.py").top
    assert top["origin"]["step"] == 0
    prop = top["propagation"]
    assert prop[-1] == "layers.0" and len(prop) >= 4  # output side first, input side last
    assert any("ReLU" in s or "GELU" in s for s in top["suggestions"])


def test_non_finite_names_the_first_module_producing_it(observe):
    top = observe("non_finite.py").top
    assert top["origin"] == {"module": "logf", "step": 0, "root": "Net"}


def test_exploding_is_ranked_above_the_nan_it_causes(observe):
    kinds = [h["kind"] for h in observe("exploding.py").report["hypotheses"]]
    assert kinds.index("exploding_gradient") < kinds.index("non_finite")


def test_data_nan_is_the_cause_not_the_first_layer(observe):
    hyps = observe("data_nan.py").report["hypotheses"]
    assert hyps[0]["kind"] == "data_anomaly"
    nf = [h for h in hyps if h["kind"] == "non_finite"]
    assert not nf or nf[0]["confidence"] < hyps[0]["confidence"]


def test_learning_rate_is_read_from_the_run(observe):
    tips = " ".join(observe("plateau.py").top["suggestions"])
    assert "lr=1e-06" in tips and "SGD" in tips


def test_every_event_written_is_in_the_vocabulary(observe):
    """Every type, state and site the monitor writes is one events.py names (EventType, the health states,
    SITES), so that readers of the trace (the rules, the report, users' own scripts) can rely on that list."""
    from neuraldbg_cli.trace import job as tracejob
    from neuraldbg_cli.trace.events import (
        RUN_STATES,
        SITES,
        ActState,
        DataState,
        EventType,
        GradState,
        LossState,
        SemanticEvent,
        UpdateState,
    )

    states = {s.value for e in (GradState, ActState, LossState, DataState, UpdateState) for s in e} | set(RUN_STATES)
    seen = set()
    for script, _, _ in CASES:
        events = tracejob.read_run(observe(script).run_dir).events
        assert events and all(type(e) is SemanticEvent for e in events), script
        assert {e.type for e in events} <= {t.value for t in EventType}, script
        assert {e.from_ for e in events} | {e.to for e in events} <= states, script
        assert {e.site for e in events} <= set(SITES), script
        seen |= {(e.type, e.site) for e in events}
    assert len({t for t, _ in seen}) >= 6 and len({s for _, s in seen}) >= 6, seen


def test_an_optimizer_built_to_maximize_is_named_as_the_root_with_its_fix(observe):
    """SGD(maximize=True) climbs the loss: the divergence names the setting first, its first suggestion removes
    it and its first fix (`minimize`) is one verify can apply; the generic "check the update sign" goes."""
    top = observe("divergence.py").top
    assert top["kind"] == "loss_divergence" and "built with maximize=True" in top["summary"], top
    assert top["suggestions"][0].startswith("remove maximize=True from SGD"), top["suggestions"]
    assert not any("check the update sign" in s or s.startswith("lr=") for s in top["suggestions"])  # no step size
    # turns an ascent into a descent
    assert top["fixes"][0]["id"] == "minimize"
