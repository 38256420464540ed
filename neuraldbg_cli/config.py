"""Settings and thresholds, resolved once: command-line option > NEURALDBG_* env var > [tool.neuraldbg].

Every threshold lives in `Thresholds` with the reason for its value, so tuning happens in one place."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.trace.events import Kind

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli before it joined the standard library
    import tomli as tomllib


class Thresholds(BaseModel):
    """Classifier thresholds. Gradient sizes are compared as RMS (norm / sqrt(numel)) so that they do
    not depend on layer width or batch size."""

    debounce: int = Field(
        3, description="observations a new state must hold before an event (non-finite values are reported at once)"
    )
    debounce_early: int = Field(
        2,
        description="observations (at most debounce) after which a new state is "
        "reported although it did not hold for debounce, when something worse took over "
        "(exploding, then dead) or the run ended: it happened",
    )
    baseline_samples: int = Field(
        3,
        description="healthy observations of a site whose median is its baseline "
        "(gradient RMS, output std, input mean and std), that growth and shifts are "
        "measured against: the first few, so that one odd batch does not set it",
    )
    vanish_ratio: float = Field(
        1e-4,
        description="a layer whose gradient RMS is below this fraction of the "
        "largest layer's in the same model is vanishing: healthy nets stay within ~1e-2",
    )
    vanish_context_ratio: float = Field(
        1e-2,
        description="a layer repeated in a stack of blocks vanishes only "
        "below this fraction of the same layer's gradient deeper in the stack: "
        "healthy stacks keep repeats within ~3x, a vanishing one loses 5-10x per "
        "block, and attention query/key, 1e-5 of the largest layer at "
        "initialisation in every block, are small by design",
    )
    vanish_bypass_ratio: float = Field(
        1e-2,
        description="a layer far below the largest is vanishing only while no layer that runs before it (nearer "
        "the input) gets more than 1/this times its gradient: where one of them gets 100x more, the "
        "gradient reaches the input by another path (a U-Net's skip concatenations around its bottleneck, a "
        "branch beside the main path) and the small layer is a branch that contributes little, not a gradient "
        "vanishing toward the input, which leaves every layer before it smaller still",
    )
    vanish_min_layers: int = Field(
        3,
        description="matrix layers with a gradient a model needs before one is "
        "judged against the largest (vanish_ratio): in a model of 1-2 layers the ratio "
        "tells nothing about depth",
    )
    vanish_abs: float = Field(1e-10, description="gradient RMS this small is vanishing whatever the other layers do")
    fade_factor: float = Field(
        20.0,
        description="a model's whole gradient norm this many times below its own early level (the median of its "
        "first baseline_samples samples with a gradient), held, while its own loss did not improve, is vanishing "
        "over time: all layers shrink together, which the per-layer comparison with the largest layer cannot see; "
        "a learning model's gradient falls a few times as its loss falls, not 20x with a loss that does not",
    )
    fade_loss_gain: float = Field(
        0.1,
        description="a loss that got this fraction of its early level (in absolute value) lower has improved: "
        "a faded gradient then is convergence, not a model that stopped learning",
    )
    fade_lookback: int = Field(
        30,
        description="steps a gradient fade is dated back at most (to the sample after the last one at its early "
        "level): bounds how long events are held for ordering",
    )
    explode_growth: float = Field(1e3, description="gradient RMS this many times its own early baseline is exploding")
    baseline_peer_ratio: float = Field(
        1e-2,
        description="a gradient RMS below this fraction of its model's median layer is not taken as the layer's "
        "baseline: a factor zero by construction at the start (LoRA's A while B is 0, a zero-initialised "
        "branch) grows from ~0 to a normal size, which is not an explosion",
    )
    explode_abs: float = Field(
        1e2, description="gradient RMS above this is exploding outright (healthy layers sit around 1e-4..1e-1)"
    )
    dead_frac: float = Field(
        0.7,
        description="fraction of units never active over a batch for a dead layer; "
        "healthy sparse ReLU nets have 50-70% zeros but few units dead on a whole batch",
    )
    dead_min_per_unit: float = Field(
        8.0,
        description="values each unit must have seen in a batch (samples x positions) before 'never active over "
        "the batch' says it is dead: a healthy ReLU unit that fires on a fraction q of its inputs is silent on "
        "all m of them with probability (1-q)^m, so on a batch of one sample (a policy acting one state at a "
        "time) every unit that is off for that input looks dead; with 8 values, a layer only looks 70% dead by "
        "chance when its units fire on under 5% of their inputs",
    )
    dead_output_frac: float = Field(
        0.3,
        description="the same for the model's last layer (e.g. a ReLU on the "
        "logits): an output unit that never fires is a class that can never win",
    )
    relu_zero_frac: float = Field(
        0.05,
        description="an output with no negative value and at least this fraction "
        "of exact zeros is a ReLU's (units can die; not judged as saturated): a ReLU "
        "layer zeroes about half its values, a sigmoid's output is never exactly 0",
    )
    saturated_frac: float = Field(
        0.6,
        description="fraction of a bounded activation's outputs pinned at its "
        "rails (sigmoid <.02 or >.98, tanh |x|>.96) for a saturated layer",
    )
    anomalous_growth: float = Field(1e2, description="activation std this many times its early baseline")
    data_scale: float = Field(
        20.0, description="inputs with |mean| or std above this are not normalised (raw 0-255 pixels: mean 127, std 73)"
    )
    target_scale: float = Field(1e3, description="regression targets with |mean| or std above this")
    data_shift: float = Field(10.0, description="input std or mean moving this many baseline stds is a shift")
    data_std_floor: float = Field(
        1e-6,
        description="the smallest baseline std a data shift is measured against: "
        "a constant input (std 0) that starts to vary is a shift, float round-off is not",
    )
    loss_window: int = Field(
        10,
        description="losses per window when judging a loss oscillation (over the "
        "latest 2 windows); the reasoner reads it as the oscillation's dating slack",
    )
    prior_band: float = Field(
        0.03,
        description="a class loss whose recent median lies within this fraction of its labels' entropy (what "
        "predicting each class at its frequency scores) sits at the prior: a model that learned nothing from its "
        "inputs; the batches' own label mix puts a constant predictor ~(C-1)/(2 batch) above it",
    )
    plateau_improvement: float = Field(
        0.25,
        description="a loss whose recent median never got this fraction "
        "below its start (significantly: plateau_sigma standard errors) never "
        "learned: a stuck run often falls a little first (to predicting the mean "
        "or the class frequencies: ~10% for a regression stuck at the target "
        "variance); a learning run falls by more than half",
    )
    diverge_factor: float = Field(
        2.0,
        description="the loss level (rolling median) this many times its best, "
        "and beyond loss_diverge_sigma noise widths, is diverging",
    )
    oscillation: float = Field(
        0.3,
        description="mean |step-to-step loss change| relative to the loss level, "
        "with frequent sign changes, for an oscillating loss",
    )
    lr_usual_span: float = Field(
        10.0,
        description="advice: an lr within this factor of its optimizer's usual "
        "value (vocab.usual_lr) is in the usual range; only a plateau below that range "
        "is told to raise it, and a lower lr jumps to the usual value from above it",
    )
    lr_lower_factor: float = Field(
        0.1,
        description="advice: a diverging/exploding/oscillating run inside the "
        "usual range is told to try this fraction of its lr (one order of magnitude: "
        "the smallest step that reliably changes a divergent run)",
    )
    weight_decay_shrink: float = Field(
        1e-3,
        description="weight decay whose per-step shrink lr*weight_decay is "
        "at least this is large enough to collapse weights (AdamW at its usual "
        "lr 1e-3, wd 0.1 shrinks 1e-4 per step)",
    )
    weight_decay_large: float = Field(
        1.0,
        description="a weight_decay at least this large is large whatever the "
        "lr (Adam's L2 term then outweighs typical gradients of 1e-3..1e-1)",
    )
    blowup_std: float = Field(
        1e3,
        description="an anomalous activation (std up >= anomalous_growth x) is a "
        "blow-up, evidence of an explosion, only at or above this std: healthy layers and "
        "logits stay within ~1e2 (a warm-up classifier's logits grow 100x from ~0.07 to 7)",
    )
    diverge_early_factor: float = Field(
        10.0,
        description="before the loss's noise is known (fewer than "
        "loss_noise_min steps), a level this many times its best is diverging: "
        "no healthy first steps multiply the loss by 10",
    )
    loss_level_window: int = Field(
        3,
        description="losses in the rolling median that is the loss level (and in "
        "the start level): one batch's spike does not move it",
    )
    loss_noise_window: int = Field(
        50, description="latest step-to-step loss differences whose MAD is the loss's own noise"
    )
    loss_noise_min: int = Field(8, description="differences needed before the noise estimate is trusted")
    diverge_fall_factor: float = Field(
        100.0,
        description="a loss below zero by this many times its start's size is diverging downwards (unbounded "
        "below: a sign error such as a subtracted KL term); a negative log-likelihood of continuous data may go "
        "somewhat below 0, never by orders of magnitude of where it started",
    )
    loss_diverge_sigma: float = Field(
        6.0,
        description="a rise above the best level must also exceed this many "
        "noise widths: the best of many rolling medians sits ~3 widths below the "
        "typical level, so a stationary noisy loss stays within ~4",
    )
    loss_cusum_k: float = Field(
        2.0,
        description="CUSUM allowance in noise widths above the best level: the "
        "change-point sum only grows once the loss is clearly above its best, so a "
        "rise is dated where it began",
    )
    plateau_min_losses: int = Field(
        40,
        description="losses before a never-improving loss is a plateau: a short "
        "flat stretch (warm-up, the first epoch) is not one",
    )
    plateau_sigma: float = Field(
        3.0,
        description="an improvement (start level - recent median) within this "
        "many standard errors of that difference is not one (chance: ~0.1%)",
    )
    plateau_horizon: float = Field(
        10.0,
        description="a loss that still falls beyond its noise is learning only when, at its recent pace, it "
        "would reach plateau_improvement below its start within this many times the losses seen so far: a "
        "full-batch loss held at a level (weight decay against the data) creeps down by 1e-5 per step, far "
        "beyond its near-zero noise, and would need thousands of times its length",
    )
    plateau_max_noise: float = Field(
        0.12,
        description="a flat loss whose relative step-to-step noise is above "
        "this is at its noise floor (a converged model being fine-tuned: 0.14-0.18 "
        "measured), not stuck: losses stuck at chance vary by 1-4%, a regression "
        "stuck at the target variance by ~9% (batch 64)",
    )
    init_gain_low: float = Field(
        0.2,
        description="advice: a weight layer whose std × sqrt(fan_in), as the script initialised it, is below this "
        "was initialised too small for its fan-in (PyTorch's default gives 0.58, Xavier 0.3-1.4, He 1.41; a "
        "hand-written std=0.01 over 100+ inputs ~0.1): a vanishing gradient from step 0 gets the reinit fix",
    )
    init_gain_high: float = Field(
        2.5,
        description="advice: above this, initialised too large (N(0, 1) over 16+ inputs gives 4 and more, "
        "He 1.41): saturation or an explosion from step 0 gets the reinit fix",
    )
    update_oversized: float = Field(
        0.15,
        description="per-step update-to-weight norm ratio above this (with "
        "the weights not shrinking) is oversized: healthy ~1e-3; measured maxima: "
        "Adam lr 1e-3 0.02-0.04, SGD lr 0.1 momentum 0.9 0.05, Adam lr 1e-2 0.19 on "
        "its first step only; an MLP at SGD lr 10: 0.2-1.0",
    )
    weight_collapse_frac: float = Field(
        0.05,
        description="a weight norm below this fraction of its first sample, "
        "and still falling, is collapsing (healthy training and usual weight "
        "decay change weight norms by small factors)",
    )
    update_ascent: float = Field(
        0.5,
        description="a manual update (no optimizer) whose change has a cosine above this with the gradient it "
        "followed climbs the loss: `p -= lr * p.grad` gives -1, its sign flipped +1; plain SGD's momentum or a "
        "weight decay tilt a descent, they do not turn it around",
    )
    weights_majority: float = Field(
        0.5,
        description="fraction of a model's matrix layers that must show an "
        "oversized update (or a collapse) for a model-wide cause such as the lr",
    )
    oscillation_high: float = Field(
        3.0,
        description="a loss that has not learned oscillates only when its swings "
        "reach this many times its start level: a loss at its noise floor from the "
        "start (fine-tuning; ~30% batch noise) swings ~1.5-2x",
    )
    learned_factor: float = Field(
        2.0,
        description="a loss level this factor below its start has learned; an "
        "oscillation is either a loss that has not learned swinging high, or one that "
        "learned jumping back above its start (healthy runs fall by more than half)",
    )
    oscillation_flips: float = Field(
        0.4,
        description="fraction of consecutive loss changes that reverse direction, "
        "for an oscillation of a loss that has not learned: swings reverse on most "
        "steps (pure noise: 2/3), a trend with noise on top far less often",
    )
    oscillation_flips_learned: float = Field(
        0.3,
        description="the same for a loss that learned and keeps jumping "
        "back above its start: the jumps are evidence already",
    )
    oscillation_jumps: int = Field(
        2,
        description="losses of the window above the start level, after it learned, "
        "for that second kind of oscillation (one is a spike)",
    )
    chance_jump: float = Field(
        1.1,
        description="a class loss (cross_entropy, nll_loss over C classes) above this many times ln(C), "
        "the loss of guessing every class equally likely, is worse than guessing: confident wrong "
        "predictions. oscillation_jumps such losses in the window (past the first loss_window) are a "
        "third kind of oscillation, whether or not the loss learned",
    )
    anomalous_output_growth: float = Field(
        1e4,
        description="anomalous_growth for the model's last layer: logits "
        "start near 0 and grow 10-130x in healthy classifiers as they grow "
        "confident; blow-ups reach 1e3-1e6x and show in hidden layers too",
    )
    rank_stop_slack: int = Field(
        1,
        description="distributed: a rank with no recorded end (killed or hung) that "
        "the others outran by more than this many steps stopped reporting; within it, "
        "ranks torchrun stopped together (one may be a step ahead) are not a desync",
    )
    rank_grad_match: float = Field(
        1e-5,
        description="distributed: gradient norms of two ranks within this relative "
        "difference are the same (averaged across ranks: a data-parallel model whose "
        "weights must stay identical); the all-reduced gradient is the same tensor on "
        "every rank, while two data shards' own gradients differ by percents",
    )
    norm_eval_shift: float = Field(
        2.0,
        description="a BatchNorm in eval mode while its model trains is a fault when the batch's channel means sit "
        "this many running standard deviations from the running means (median over channels): pretrained "
        "statistics frozen on purpose (a detection fine-tune's norm_eval) stay well within 1",
    )
    norm_eval_log_scale: float = Field(
        2.3,
        description="... or when the batch's channel variances differ from the running ones by this much in log "
        "(median |ln(var_batch / var_running)|; 2.3 = a factor of 10)",
    )
    norm_min_values: int = Field(
        8,
        description="a BatchNorm in training mode whose batch statistics rest on fewer values per channel than this "
        "normalises with noise (BatchNorm1d at batch 2, a small per-rank batch under DDP)",
    )
    norm_momentum_max: float = Field(
        0.5,
        description="a BatchNorm momentum at or above this is another framework's convention (Keras' 0.9/0.99 is the "
        "old average's weight; PyTorch's momentum is the new batch's, default 0.1)",
    )
    norm_drift_noise: float = Field(
        2.5,
        description="a BatchNorm in training mode drifts when its batch statistics sit this many times farther "
        "from its running ones than an i.i.d. batch can: a batch of B values per channel puts its channel means "
        "about 0.67/sqrt(B) running standard deviations from the running means (median over channels, all of "
        "the variance between samples; less with spatial positions) and its log variances about "
        "0.67*sqrt(2/B) from theirs. Measured: healthy ResNet/CNN training 0.2-0.6 of the limit after the first "
        "steps, a GAN discriminator's separate real/fake batches ~1.5 (several calls a step: not judged), two "
        "sources preprocessed differently in alternating batches 1.5",
    )
    norm_drift_shift: float = Field(
        0.25,
        description="... and at least this many running standard deviations (median over channels): at large "
        "batches the noise limit falls below the lag of running statistics behind weights that still move",
    )
    norm_drift_log_scale: float = Field(
        0.4, description="... or a median |ln(var_batch / var_running)| of at least this (a variance ratio of 1.5)"
    )
    norm_drift_memory: float = Field(
        0.05,
        description="running statistics still remember their initial 0/1 (or a start far from the data) while "
        "(1 - momentum)^n, n the training batches they averaged, is above this (29 batches at momentum 0.1, 299 "
        "at 0.01): not judged for drift before",
    )
    norm_drift_memories: float = Field(
        3.0,
        description="a drift must hold for this many of the running statistics' time constants (1/momentum "
        "steps: 30 at the default 0.1) before it is one: running statistics lag weights that move fast early on, "
        "and that lag shrinks within a few time constants once the weights settle",
    )
    norm_gain_collapse: float = Field(
        0.05,
        description="a normalisation gain (its weight's RMS) below this fraction of its first value, and falling "
        "(norm_gain_rise), has collapsed: the layer passes (almost) no signal. Healthy gains stay within 0.1-10x "
        "of their start, weight decay on LayerNorm gains included (the gradient holds them up); one that settled "
        "low over a long training is not falling",
    )
    norm_gain_growth: float = Field(
        20.0,
        description="a normalisation gain above this many times its first value, and still rising, grows without "
        "bound (healthy: within 0.1-10x of its start)",
    )
    norm_gain_rise: float = Field(
        1.25,
        description="a gain rises (falls) when it is this factor above (below) its value norm_gain_window samples "
        "before: a gain collapses while it falls, grows without bound while it rises",
    )
    norm_gain_window: int = Field(3, description="samples of a gain's RMS its trend is judged over")
    loss_row_tol: float = Field(
        1e-3,
        description="a loss input whose rows (over the class dim) all sum to 1 within this, with every value in "
        "[0, 1], holds probabilities: fp32 softmax rows sum to 1 within ~1e-6, logits never do; x16 for "
        "half-precision inputs (bf16 rounds each value by up to 2^-9, a row sum by up to ~2e-3)",
    )
    loss_logprob_tol: float = Field(
        1e-3,
        description="a loss that takes log-probabilities (nll_loss, kl_div) fed a value above this holds raw "
        "scores: log_softmax is <= 0 exactly, log(p + 1e-8) at most ~1e-8 above it, logits ~1 and more",
    )
    loss_sum_terms: int = Field(
        64,
        description="a reduction='sum' over at least this many terms scales every gradient by that factor "
        "against the mean a learning rate is usually tuned for (only reported with an unstable loss)",
    )
    resid_dead_ratio: float = Field(
        1e-3,
        description="a residual branch whose RMS is below this fraction of its skip path's (the block's input) adds "
        "nothing: healthy blocks sit at 0.1-3; a zero-initialised branch (ReZero, Fixup, zero_init_residual, "
        "adaLN-zero) starts at 0 but leaves this range within a few steps, which resid_grow tells apart",
    )
    resid_grow: float = Field(
        2.0,
        description="a branch below resid_dead_ratio whose ratio has grown by this factor since resid_window samples "
        "before (or from exactly 0 to anything) is a zero-initialised branch that is learning, not a dead one",
    )
    resid_window: int = Field(
        4,
        description="samples of a block's branch/skip ratio the dead-branch and stream-growth trends are judged "
        "over (and needed before either is judged): the trend, not the start, decides",
    )
    resid_swamp_ratio: float = Field(
        10.0,
        description="a residual branch whose RMS is this many times its skip path's swamps it: the block no longer "
        "passes its input on (the skip's benefit is lost); healthy Pre-LN blocks sit at 0.1-3, the first block "
        "over a small embedding up to ~5",
    )
    resid_stream_growth: float = Field(
        100.0,
        description="the residual stream's RMS at the output of a model's last block this many times its RMS at "
        "the input of its first block (and still rising) grows without bound: a healthy Pre-LN stack of 12-48 "
        "blocks grows its stream ~sqrt(depth) to ~10x",
    )
    attn_logit_max: float = Field(
        50.0,
        description="an attention logit (q.k * scale) above this makes softmax rows nearly one-hot (exp(50) ~ 5e21) "
        "and is the logit growth that precedes loss spikes (the reason for QK-norm): healthy heads stay below ~20",
    )
    attn_logit_rise: float = Field(
        1.5,
        description="logits above attn_logit_max grow without bound when the largest logit is this factor above "
        "its value attn_window samples before (a large but stable logit is not growth)",
    )
    attn_window: int = Field(
        3, description="samples of an attention layer's largest logit the rise (attn_logit_rise) is judged over"
    )
    attn_entropy_collapsed: float = Field(
        0.05,
        description="median over rows (and heads) of the normalised attention entropy (entropy / log(keys)) below "
        "this: most rows put nearly all their weight on one key. Healthy trained heads sit at 0.2-0.9, "
        "heads at initialisation near 1",
    )
    attn_entropy_start: float = Field(
        0.3,
        description="a layer collapsed only when its first sampled median entropy was at least this: a layer that "
        "is sharp from its first step (an attention built to pick one key) did not collapse",
    )


# the contract's kinds that no rule judges yet: accepted by --fail-on/--stop-on (a gate written for them is valid
# and never fires) so that a CI job can name every kind of the contract
CONTRACT_ONLY_KINDS: set[str] = set()
SAMPLE_WARMUP = 10  # the probe samples every step up to this one, then every `every`-th (probe.hooks.every_n)
KNOWN_KINDS = {k.value for k in Kind} | CONTRACT_ONLY_KINDS


class Settings(BaseModel):
    run_dir: str | None = None
    fail_on: list[str] = Field(default_factory=list)
    stop_on: list[str] = Field(default_factory=list)  # end the training once one of these is confirmed
    min_confidence: float = 0.5
    every: int = 10
    quiet: bool = False
    thresholds: Thresholds = Field(default_factory=Thresholds)

    @classmethod
    def resolve(cls, cli: dict[str, Any], cwd: Path | None = None) -> Settings:
        """Merge pyproject, environment and command line (later wins) and validate once."""
        merged: dict[str, Any] = {}
        merged.update(_from_pyproject(cwd or Path.cwd()))
        _merge(merged, _from_env(os.environ))
        _merge(merged, {k: v for k, v in cli.items() if v is not None})
        for key in ("fail_on", "stop_on"):
            if isinstance(merged.get(key), str):
                merged[key] = parse_fail_on(merged[key], "--" + key.replace("_", "-"))
        try:
            settings = cls.model_validate(merged)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise NeuraldbgError(f"neuraldbg: bad setting {loc}: {err['msg']}") from None
        if settings.every < 1:
            raise NeuraldbgError("neuraldbg: --every must be >= 1")
        return settings


def parse_fail_on(text: str, option: str = "--fail-on") -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k != "any" and k not in KNOWN_KINDS]
    if bad:
        raise NeuraldbgError(
            f"neuraldbg: unknown kind {bad[0]!r} for {option}; use 'any' or one of: {', '.join(sorted(KNOWN_KINDS))}"
        )
    return kinds


def parse_threshold_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in Thresholds.model_fields:
            raise NeuraldbgError(
                f"neuraldbg: bad --threshold {pair!r}; use NAME=VALUE with NAME one of: "
                f"{', '.join(Thresholds.model_fields)}"
            )
        out[key] = value.strip()
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if key == "thresholds" and isinstance(value, dict):
            base.setdefault("thresholds", {}).update(value)
        else:
            base[key] = value


def _from_env(env: os._Environ | dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in ("run_dir", "fail_on", "stop_on", "min_confidence", "every", "quiet"):
        value = env.get(f"NEURALDBG_{field.upper()}")
        if value is not None:
            out[field] = value
    if env.get("NEURALDBG_THRESHOLDS"):
        out["thresholds"] = parse_threshold_pairs(env["NEURALDBG_THRESHOLDS"].split(","))
    return out


def _from_pyproject(start: Path) -> dict[str, Any]:
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text())
            except (OSError, tomllib.TOMLDecodeError) as e:
                raise NeuraldbgError(f"neuraldbg: cannot read {path}: {e}") from None
            section = dict(data.get("tool", {}).get("neuraldbg", {}))
            return {k.replace("-", "_"): v for k, v in section.items()}
    return {}
