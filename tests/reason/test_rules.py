"""Rules on hand-made events: every Kind has one rule; causes rank above consequences."""
from neuraldbg_cli.reason import crossrank
from neuraldbg_cli.reason.families import RULES
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.reasoner import rank
from neuraldbg_cli.trace.events import CROSS_RANK_KINDS, Kind, SemanticEvent


def ev(type_, step, module, frm, to, site, **metrics):
    return SemanticEvent(type=type_, step=step, module=module, root="Net", from_=frm, to=to, site=site,
                         metrics=metrics)


def test_every_kind_has_exactly_one_rule():
    """Per-run kinds by a rule named after them; the distributed kinds by crossrank's comparisons."""
    assert sorted(r.__name__ for r in RULES) == sorted(k.value for k in Kind if k not in CROSS_RANK_KINDS)
    assert {crossrank.divergence.__name__, crossrank.desync.__name__} == {"divergence", "desync"}
    assert CROSS_RANK_KINDS == {Kind.rank_divergence, Kind.rank_desync}


def test_each_rule_is_silent_without_events():
    ctx = Context(events=[])
    assert all(rule(ctx) is None for rule in RULES)


def test_vanishing_origin_is_input_side():
    models = [{"name": "Net", "order": ["a", "b", "c"], "modules": {"a": {"type": "Linear"}}}]
    evs = [ev("gradient_health_transition", 0, m, "healthy", "vanishing", "gradient", rms=1e-12, ratio_to_max=1e-10)
           for m in ("b", "a")]
    h = next(r for r in RULES if r.__name__ == "vanishing_gradient")(Context(events=evs, models=models))
    assert h.origin.module == "a" and h.propagation == ["b", "a"]


def test_cause_ranks_above_consequence():
    evs = [ev("gradient_health_transition", 3, "fc", "healthy", "exploding", "gradient", rms=1e4),
           ev("non_finite", 5, "fc", "exploding", "non_finite", "output")]
    ctx = Context(events=evs)
    hyps = rank([h for h in (r(ctx) for r in RULES) if h], slack=10)
    assert [h.kind for h in hyps][:2] == [Kind.exploding_gradient, Kind.non_finite]
    # the contract: a consequence ranks below its cause and names it; its confidence (presence) is kept
    assert hyps[1].caused_by == Kind.exploding_gradient and hyps[1].confidence == 0.9


def test_consequence_that_started_first_is_not_demoted():
    evs = [ev("non_finite", 1, "fc", "normal", "non_finite", "output"),
           ev("gradient_health_transition", 50, "fc", "healthy", "exploding", "gradient", rms=1e4)]
    ctx = Context(events=evs)
    hyps = rank([h for h in (r(ctx) for r in RULES) if h], slack=10)
    nf = next(h for h in hyps if h.kind == Kind.non_finite)
    assert nf.caused_by is None


def test_select_filters_in_trace_order():
    """Context indexes the events once; select still answers like a scan of all of them, in trace order."""
    kinds = [("gradient_health_transition", "vanishing", "gradient"), ("non_finite", "non_finite", "output"),
             ("gradient_health_transition", "non_finite", "gradient"), ("data_anomaly", "shifted", "input")]
    evs = []
    for i in range(40):
        type_, to, site = kinds[i * 7 % 4]  # the kinds interleaved
        evs.append(ev(type_, i, "m", "a", to, site))
    ctx = Context(events=evs)
    for types, to, sites in [((), (), ()), (["gradient_health_transition"], (), ()), ((), ["non_finite"], ()),
                             ((), ["non_finite"], ["gradient"]), (["data_anomaly", "non_finite"], ["x"], ()),
                             (["non_finite"], (), ["output", "activation"])]:
        assert ctx.select(types, to, sites) == [e for e in evs if (not types or e.type in types)
                                                and (not to or e.to in to) and (not sites or e.site in sites)]


def test_gradient_that_comes_back_is_not_cut_off():
    """A detached layer never gets its gradient back; layers that lose it now and then under a wild optimizer
    (saturated activations at lr=1.0) rank below the unstable loss that drives them (a CPU-dependent run of
    tests/assets/unstable.py did this)."""
    grad = "gradient_health_transition"
    cut = [ev(grad, 5, m, "healthy", "absent", "gradient", rms=0.0) for m in ("a", "b")]
    flapping = [ev(grad, s, m, frm, to, "gradient", rms=r) for m in ("a", "b") for s, frm, to, r in
                [(40, "healthy", "absent", 0.0), (43, "absent", "healthy", 0.01), (50, "healthy", "absent", 0.0)]]
    loss = [ev("optimizer_instability", 10, None, "normal", "oscillating", "loss", loss=7.5)]
    rule = next(r for r in RULES if r.__name__ == "no_gradient")
    assert "never receive" in rule(Context(events=cut)).summary
    h = rule(Context(events=flapping))
    assert "get it back" in h.summary and h.confidence < rule(Context(events=cut)).confidence
    ctx = Context(events=loss + flapping)
    hyps = rank([h for h in (r(ctx) for r in RULES) if h], slack=10)
    assert hyps[0].kind == Kind.unstable_loss


def test_a_layer_cut_off_for_good_is_judged_apart_from_one_that_comes_back():
    """jcjohnson's dynamic net with its first layer's output detached: input_linear never gets a gradient;
    middle_linear, reused a random number of times per forward (none on some steps), loses it now and then.
    The layer cut off for good carries the hypothesis at its own confidence, not halved by the other."""
    grad = "gradient_health_transition"
    rule = next(r for r in RULES if r.__name__ == "no_gradient")
    cut = [ev(grad, 0, "input_linear", "healthy", "absent", "gradient")]
    skipped = [ev(grad, 7, "middle_linear", "healthy", "absent", "gradient"),
               ev(grad, 10, "middle_linear", "absent", "healthy", "gradient", rms=0.7)]
    alone = rule(Context(events=cut))
    both = rule(Context(events=cut + skipped))
    assert both.confidence == alone.confidence >= 0.7 and both.origin.module == "input_linear"
    assert both.summary == ("input_linear never receives a gradient (.grad stays None or zero) from step 0. "
                            "middle_linear loses its now and then and gets it back.")
    assert rule(Context(events=skipped[:1] + skipped[1:])).confidence < 0.5  # only the skipped layer: a note


def test_oscillation_dated_a_window_late_still_causes_saturation():
    """The oscillation test needs two windows of losses, so its onset can be placed no earlier than one
    window in: saturation right after the first wild Adam step (step 1) is its consequence even when the
    oscillation is dated step 12 (unstable_adam_lr05_mlp.py on an AMD CPU did this)."""
    evs = [ev("activation_regime_shift", 1, m, "normal", "saturated", "activation", sat_frac=0.78) for m in ("a", "b")]
    evs += [ev("optimizer_instability", 12, None, "normal", "oscillating", "loss", loss=3.8)] * 2
    ctx = Context(events=evs)
    hyps = [h for h in (r(ctx) for r in RULES) if h]
    assert rank([h.model_copy(deep=True) for h in hyps], slack=10)[0].kind == Kind.saturated_activation
    ranked = rank(hyps, slack=10, loss_window=10)
    assert ranked[0].kind == Kind.unstable_loss and ranked[1].caused_by == Kind.unstable_loss


def test_event_schema_is_spelled_once_in_effect():
    """The event type's Literal spells the schema out (mypy takes no constant there): it must stay EVENT_SCHEMA."""
    import typing

    from neuraldbg_cli.trace.events import EVENT_SCHEMA

    hint = typing.get_type_hints(SemanticEvent)["schema_"]
    assert typing.get_args(hint) == (EVENT_SCHEMA,)


def _gan_models():
    mods = {f"main.{i}": {"type": t, "params": p} for i, (t, p) in enumerate([("Conv2d", 10), ("LeakyReLU", 0),
                                                                            ("Conv2d", 10), ("Sigmoid", 0)])}
    return [{"name": n, "order": [*mods, "main"], "modules": dict(mods, main={"type": "Sequential", "params": 0})}
            for n in ("Generator", "Discriminator")]


def _gan_events(rival_loss_ratio):
    fade = SemanticEvent(type="gradient_health_transition", step=20, module="main.0", root="Generator",
                         from_="healthy", to="vanishing", site="model_gradient",
                         metrics={"grad_norm": 0.2, "early_norm": 6.0, "fade": 30.0, "loss_early": -0.44,
                                  "loss_now": -0.004, "game": 1.0, "rival_loss_ratio": rival_loss_ratio})
    sat = SemanticEvent(type="activation_regime_shift", step=20, module="main.2", root="Discriminator",
                        from_="normal", to="saturated", site="activation", metrics={"sat_frac": 1.0})
    return [sat, fade]


def test_discriminator_winning_outright_is_the_cause_of_its_saturated_output():
    """G's whole gradient faded while D's loss went to 0 and D's output Sigmoid saturated: the story is D
    winning outright (G's gradient vanished), ranked as the cause of the saturation; a model's final Sigmoid
    is never told to switch to ReLU."""
    ctx = Context(events=_gan_events(0.006), models=_gan_models())
    hyps = rank([h for h in (r(ctx) for r in RULES) if h], slack=10)
    assert [h.kind for h in hyps] == [Kind.vanishing_gradient, Kind.saturated_activation]
    top, sat = hyps
    assert top.summary.startswith("The discriminator wins outright") and top.origin.root == "Generator"
    assert any("-log D(G(z))" in s for s in top.suggestions) and any("BCEWithLogits" in s for s in top.suggestions)
    assert sat.caused_by == Kind.vanishing_gradient
    assert not any("ReLU" in s for h in hyps for s in h.suggestions)


def test_a_faded_model_whose_opponent_does_not_win_is_a_plain_fade():
    ctx = Context(events=_gan_events(0.8), models=_gan_models())
    h = next(r for r in RULES if r.__name__ == "vanishing_gradient")(ctx)
    assert "whole gradient faded over time" in h.summary and "wins outright" not in h.summary


def test_hidden_saturated_activation_still_suggests_relu():
    models = [{"name": "Net", "order": ["a", "b", "c"], "modules": {"a": {"type": "Linear", "params": 4},
                                                                     "b": {"type": "Tanh", "params": 0},
                                                                     "c": {"type": "Linear", "params": 4}}}]
    evs = [SemanticEvent(type="activation_regime_shift", step=3, module="b", root="Net", from_="normal",
                         to="saturated", site="output", metrics={"sat_frac": 0.9})]
    h = next(r for r in RULES if r.__name__ == "saturated_activation")(Context(events=evs, models=models))
    assert any("ReLU" in s for s in h.suggestions)


def test_a_blow_up_that_left_a_residual_branch_swamping_its_skip_is_still_a_present_divergence():
    """makemore's transformer at lr 1: the loss blows up from step 1 and comes back 140 steps later, but the
    branches the blow-up threw out of scale stay so: the divergence is not history (at its full confidence),
    the swamping its consequence. The same divergence with the branches back to normal is history (< 0.5)."""
    loss = [ev("optimizer_instability", 1, None, "normal", "diverging", "loss", loss=52.6, start=3.5, recent=43.6),
            ev("optimizer_instability", 140, None, "diverging", "normal", "loss", loss=6.8, start=3.5, recent=7.5),
            ev("run_summary", 399, None, "running", "finished", "summary")]
    swamp = ev("residual_health", 1, "h.0", "normal", "swamping", "residual", ratio=126.0)
    healed = ev("residual_health", 150, "h.0", "swamping", "normal", "residual", ratio=2.0)
    div = next(r for r in RULES if r.__name__ == "loss_divergence")
    assert div(Context(events=loss + [swamp])).confidence == 0.8
    assert div(Context(events=loss + [swamp, healed])).confidence < 0.5
    ctx = Context(events=loss + [swamp])
    hyps = rank([h for h in (r(ctx) for r in RULES) if h], slack=10)
    assert hyps[0].kind == Kind.loss_divergence
    assert next(h for h in hyps if h.kind == Kind.residual_imbalance).caused_by == Kind.loss_divergence


def test_a_wild_oscillation_that_left_attention_collapsed_is_still_present():
    """nanoGPT at lr 0.5 without warm-up: the loss swings 4.4 -> 80 from step 1 and settles 25 steps later, but
    the attention rows it collapsed stay collapsed: the oscillation is not history (its full confidence)."""
    loss = [ev("optimizer_instability", 1, None, "normal", "oscillating", "loss", loss=14.0, low=4.4, high=80.5),
            ev("optimizer_instability", 26, None, "oscillating", "normal", "loss", loss=11.6),
            ev("run_summary", 300, None, "running", "finished", "summary")]
    collapsed = ev("attention_health", 1, "h.0.attn", "normal", "collapsed", "attention", max_logit=372.0)
    unstable = next(r for r in RULES if r.__name__ == "unstable_loss")
    assert unstable(Context(events=loss + [collapsed])).confidence == 0.66
    assert unstable(Context(events=loss)).confidence < 0.5
