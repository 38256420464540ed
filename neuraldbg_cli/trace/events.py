"""Records that cross stages: per-step statistics (probes -> monitor), SemanticEvent (monitor -> trace ->
reasoner), Hypothesis/Report (reasoner -> renderers). No torch here: the reasoner must run without it."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import Annotated, Any, Final, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field

EVENT_SCHEMA: Final = "neuraldbg.event/1"
EXPLAIN_SCHEMA = "neuraldbg.explain/1"
META_SCHEMA = "neuraldbg.meta/1"
SUPPORTED_EVENT_SCHEMAS = {EVENT_SCHEMA}
MAX_STEP = (1 << 63) - 1  # steps are int64: a larger one in a trace is corrupt


class Kind(str, Enum):
    """Failure kinds, exact strings of the contract."""

    vanishing_gradient = "vanishing_gradient"
    exploding_gradient = "exploding_gradient"
    dead_activation = "dead_activation"
    saturated_activation = "saturated_activation"
    non_finite = "non_finite"
    data_anomaly = "data_anomaly"
    unchanged_weights = "unchanged_weights"
    no_gradient = "no_gradient"
    loss_plateau = "loss_plateau"
    loss_divergence = "loss_divergence"
    unstable_loss = "unstable_loss"
    normalization_fault = (
        "normalization_fault"  # a normalisation layer misbehaves (BatchNorm in eval while training...)
    )
    residual_imbalance = "residual_imbalance"  # a residual branch adds nothing or swamps its skip; a growing stream
    attention_collapse = "attention_collapse"  # attention logits grow without bound, rows collapse to one-hot
    loss_misuse = "loss_misuse"  # the loss is called wrongly (broadcasting target, softmax before cross_entropy...)
    loop_misuse = "loop_misuse"  # the training loop calls the API wrongly (gradients never zeroed between steps...)
    memory_growth = "memory_growth"  # each step's autograd graph kept alive across steps (`total += loss`...)
    rank_divergence = "rank_divergence"  # distributed: replicas that should be identical differ
    rank_desync = "rank_desync"  # distributed: ranks disagree on how far they trained


CROSS_RANK_KINDS = frozenset({Kind.rank_divergence, Kind.rank_desync})  # judged across ranks (crossrank.py)


class GradState(str, Enum):
    healthy = "healthy"
    vanishing = "vanishing"
    exploding = "exploding"
    non_finite = "non_finite"
    absent = "absent"


class ActState(str, Enum):
    normal = "normal"
    dead = "dead"
    saturated = "saturated"
    anomalous = "anomalous"
    non_finite = "non_finite"


class LossState(str, Enum):
    normal = "normal"
    plateau = "plateau"
    diverging = "diverging"
    oscillating = "oscillating"
    non_finite = "non_finite"


class DataState(str, Enum):
    normal = "normal"
    non_finite = "non_finite"
    extreme_scale = "extreme_scale"
    shifted = "shifted"


class UpdateState(str, Enum):
    updating = "updating"
    unchanged = "unchanged"
    oversized = "oversized"  # each optimizer step moves the weights by a large fraction of their size (lr too high)
    collapsing = "collapsing"  # weight norms shrink toward 0 (e.g. a huge weight_decay)
    ascending = "ascending"  # a manual update moves the weights along their gradient (`p += lr * p.grad`)


class NormState(str, Enum):
    """A normalisation layer (families/normalization.py)."""

    normal = "normal"
    eval_mode = "eval_mode"  # a BatchNorm in eval mode while its model trains, with stale running statistics
    poisoned = "poisoned"  # its running statistics are NaN/Inf
    few_values = "few_values"  # too few values per channel for batch statistics
    momentum = "momentum"  # momentum >= 0.5: another framework's convention (PyTorch's is the new batch's weight)
    drift = "drift"  # in training mode, the batch statistics stay far from the running ones eval mode will use
    gain_collapse = "gain_collapse"  # the gain's RMS fell toward 0 from its first value and is still falling
    gain_growth = "gain_growth"  # the gain's RMS grew many times its first value and is still rising


class ResidualState(str, Enum):
    """A residual block (families/residual.py): its branch against its skip path, the stream through the blocks."""

    normal = "normal"
    dead_branch = "dead_branch"  # the branch adds ~nothing to the skip and does not grow while its parameters train
    swamping = "swamping"  # the branch is many times the skip path it is added to
    stream_growth = "stream_growth"  # the residual stream's RMS grows block after block, and over training


class AttnState(str, Enum):
    """An attention layer (families/attention.py): its logits and the entropy of its rows."""

    normal = "normal"
    logit_growth = "logit_growth"  # the largest attention logit is large and still rising
    collapsed = "collapsed"  # most rows attend to one key (normalised entropy ~0) where they started spread


class LossCallState(str, Enum):
    """How a loss is called (families/lossfn.py): what its input and target are against what it expects."""

    normal = "normal"
    broadcast = "broadcast"  # an elementwise loss's target broadcasts against the input to another shape
    probabilities_to_ce = "probabilities_to_ce"  # cross_entropy fed probabilities (softmax before it)
    probabilities_to_logits_loss = "probabilities_to_logits_loss"  # a with-logits loss fed values in [0, 1]
    logits_to_nll = "logits_to_nll"  # a log-probability loss (nll_loss, kl_div) fed values above 0
    probabilities_to_nll = "probabilities_to_nll"  # a log-probability loss fed probabilities (softmax, not log)
    sum_reduction = "sum_reduction"  # reduction="sum" over many terms: gradients scale with the batch
    negated = "negated"  # the loss minimised is negative and falls, though made of losses that are never below 0
    unbounded = "unbounded"  # the loss minimised dips below 0 now and then, though its loss calls never go below 0


class LoopState(str, Enum):
    """An optimizer's training loop (families/loop.py): what happens to its gradients between two of its steps."""

    normal = "normal"
    grads_not_zeroed = "grads_not_zeroed"  # nothing zeroed them since its last step: each step applies their sum
    zeroed_before_step = "zeroed_before_step"  # there after backward(), gone at step(): the step applies nothing
    clipped_after_step = "clipped_after_step"  # clip_grad_norm_/value_ right after step(): it clips nothing applied
    single_class_batches = "single_class_batches"  # every batch one class, the batches several: sorted, unshuffled
    sampler_epoch_fixed = "sampler_epoch_fixed"  # a shuffling DistributedSampler's epoch never set: one order
    graphs_kept = "graphs_kept"  # the autograd graphs of earlier steps stay alive: memory grows with the run


class EventType(str, Enum):
    gradient_health_transition = "gradient_health_transition"
    activation_regime_shift = "activation_regime_shift"
    optimizer_instability = "optimizer_instability"
    data_anomaly = "data_anomaly"
    non_finite = "non_finite"
    parameter_update = "parameter_update"
    run_summary = "run_summary"
    loss_call_health = "loss_call_health"
    normalization_health = "normalization_health"
    residual_health = "residual_health"
    attention_health = "attention_health"
    loop_health = "loop_health"
    restart = "restart"  # torchrun restarted this rank (--max-restarts): its trace goes on after the failure


# Every value neuraldbg writes in the `site` field and in run_summary's `from`/`to` (others are read too)
SITES = (
    "output",
    "activation",
    "gradient",
    "weights",
    "input",
    "target",
    "loss",
    "run",
    "loss_call",
    "norm",
    "residual",
    "attention",
    "loop",
)
RUN_STATES = ("running", "finished")


class SemanticEvent(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """One line of events.jsonl: the monitor makes it, trace writes it and reads it back (the one definition of
    an event). `from`/`to` are health states; `step` is the step the new state began. Reading decodes a line
    straight into it, types checked in C: an integer metric becomes a float, an unknown field is ignored (the
    contract allows extra fields), and an event schema this neuraldbg does not know is no SemanticEvent (trace
    reports it). Instances are not tracked by the cyclic GC (gc=False): they hold no cycles, and 200k of them
    would slow every collection."""

    # EVENT_SCHEMA spelled out: mypy takes no constant's name inside Literal[...]
    schema_: Literal["neuraldbg.event/1"] = msgspec.field(default=EVENT_SCHEMA, name="schema")
    type: str
    step: Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]
    module: str | None = None
    root: str | None = None
    from_: str = msgspec.field(name="from")
    to: str
    metrics: dict[str, float | None] = msgspec.field(default_factory=dict)
    site: str | None = None  # one of SITES

    def to_json_dict(self) -> dict[str, Any]:
        """The line as JSON data, keys in the order above (`schema`, `from` by their JSON names)."""
        return msgspec.to_builtins(self)


# ---- statistics handed from probes to the monitor (plain data, hot-ish path: no pydantic) ----

ACT_FIELDS = ("n", "mean", "std", "min", "max", "zero_frac", "dead_frac", "sat01", "sat11", "nonfinite")


@dataclass(slots=True)
class ActStats:
    """Full statistics of one tensor on a sampled step. dead_frac: units never > 0 over the batch;
    sat01/sat11: fraction near the rails of a [0,1] / [-1,1] activation. Min, max and the fractions are
    measured on activations and input data only (NaN and 0 elsewhere); an activation's min and fractions
    on an evenly spread sample of 16K elements. nonfinite: the count of NaN/Inf values for input data,
    elsewhere 1.0 for "at least one"."""

    n: float
    mean: float
    std: float
    min: float
    max: float
    zero_frac: float
    dead_frac: float
    sat01: float
    sat11: float
    nonfinite: float
    # values each unit behind dead_frac saw (batch x positions per channel or feature); 0: not measured. Not in
    # the trace: the monitor reads it live (a unit silent on one input is not dead)
    per_unit: float = 0.0
    count: float = 0.0  # the tensor's elements (0: not measured); live only, like per_unit


@dataclass(slots=True)
class GradStats:
    norm: float | None  # None: no parameter of the module had a .grad
    numel: int
    weight_norm: float | None = None  # L2, sampled steps only
    checksum: tuple | None = None  # per parameter, sampled steps: changes whenever any weight does
    update_norm: float | None = None  # L2 of the change one optimizer step made, sampled steps only
    update_dot: float | None = None  # that change dotted with the gradient (a manual update's): < 0 descends


@dataclass(slots=True)
class NormStats:
    """A normalisation layer on a sampled step (normprobe.py). training: it ran in training mode at some call of
    the step; per_channel: values behind each channel's batch statistics (0: no running statistics read);
    batch: the batch size behind them; calls: its training-mode calls in the step; running_finite /
    running_initial: 1.0 or 0.0 (None: not read); shift / log_scale: the batch's statistics against the running
    ones (see normprobe.values); tracked: its num_batches_tracked (training-mode forwards so far); gain_rms: the
    RMS of its weight (None: no gain)."""

    type: str
    training: bool
    trainable: bool
    momentum: float | None
    per_channel: int
    running_finite: float | None = None
    running_initial: float | None = None
    shift: float | None = None
    log_scale: float | None = None
    gain_rms: float | None = None
    batch: int = 0
    calls: int = 0
    tracked: float | None = None


@dataclass(slots=True)
class ResidStats:
    """A residual block on a sampled step (residprobe.py): its output is its input (the skip) plus a branch.
    skip_rms / branch_rms / out_rms: RMS of the input, of output - input and of the output (None: not measured,
    a Post-LN block whose output is normalised after the addition); norm: "pre" (a norm inside the branch), "post"
    (the sum normalised), "none"; found: how the skip was found ("graph": the output's autograd node adds the
    input; "type": a known block type or name with the input not requiring a gradient)."""

    type: str
    norm: str
    found: str
    skip_rms: float | None = None
    branch_rms: float | None = None
    out_rms: float | None = None


@dataclass(slots=True)
class AttnStats:
    """One attention layer on a sampled step (attnprobe.py), recomputed for a few query rows of its first call:
    max_logit: the largest q.k * scale (plus a float mask's bias) over the keys a row may attend to;
    entropy / entropy_median: mean and median over rows (and heads) of the rows' entropy divided by log(keys
    allowed); rows: rows measured; keys: keys per row (before masking); source: "sdpa"
    (F.scaled_dot_product_attention) or "mha"."""

    source: str
    heads: int
    rows: int
    keys: int
    max_logit: float = float("nan")
    entropy: float = float("nan")
    entropy_median: float = float("nan")


@dataclass(slots=True)
class LossCallStats:
    """The first call of one loss on a sampled step (lossprobe.py). name: the functional loss (a loss module's
    too, see lossprobe.MODULE_LOSSES), module: the loss module's class (None: called as a function); shapes as
    called; broadcast_shape: what input and target broadcast to when that is not the input's shape (the
    target broadcasting bug), else None; classes: size of the class dim (cross_entropy, nll_loss, kl_div);
    terms: values the reduction adds up; min/max: of the input (an evenly spread sample); row_sum_dev: max over
    a few leading rows of |sum over classes - 1| (None: no class dim); source: the op that made the input."""

    name: str
    module: str | None
    input_shape: tuple[int, ...]
    target_shape: tuple[int, ...] | None
    broadcast_shape: tuple[int, ...] | None
    reduction: str
    dtype: str
    classes: int | None
    terms: int
    min: float = float("nan")
    max: float = float("nan")
    row_sum_dev: float | None = None
    source: str | None = None  # the autograd op that made the input (lossprobe.source_op); None: no graph
    one_class: float | None = None  # 1.0: every class index of the batch is the same (None: not read)
    first_target: float | None = None  # the batch's first class index (with one_class)
    counts: tuple[float, ...] | None = None  # class indices of the batch per class (lossprobe.label_counts)


@dataclass(slots=True)
class LoopStats:
    """One optimizer between its last sampled step and this one (loopprobe.py), read off one parameter it steps.
    kept: 1.0 when nothing zeroed that parameter's gradient between the two steps (set to None, or all zeros at a
    backward pass), 0.0 when something did, -1.0 unknown (its gradient was all zeros after the last step);
    stale: |gradient slice after the last step| / |slice now| (only meaningful when kept); passes: backward passes
    between the two steps; line / backward_line: the script's line of the optimizer.step() call and of the backward()
    call that begins its gradient, the first after the latest step of any optimizer (0: unknown)."""

    root: str
    module: str
    kept: float
    stale: float | None
    passes: int
    line: int = 0
    backward_line: int = 0
    # 1.0: its gradient was there (non-zero) after a backward pass of the step and gone (None or all zeros) when
    # step() began; 0.0: still there; -1.0: not checked
    cleared: float = -1.0
    # 1.0: a clip_grad_norm_/clip_grad_value_ call came after the optimizer's step with no backward pass since
    # (it clips gradients the step already applied); 0.0: before the step; -1.0: no call. clip_line: its line
    clipped: float = -1.0
    clip_line: int = 0


@dataclass(slots=True)
class SamplerStats:
    """A DistributedSampler as an epoch's iteration over it began (loopprobe.py): how many times it has been
    iterated, its epoch now, the distinct epochs its iterations saw, whether it shuffles, the script line of the
    loop over it."""

    iterations: int
    epoch: int
    epochs: int
    shuffle: bool
    line: int = 0


@dataclass(slots=True)
class GraphStats:
    """A sampled step's reading of the autograd graphs kept from earlier steps (graphwatch.py): `alive`, earlier
    sampled steps with a node of their graph still alive, `oldest` the first of them (-1: none), `kept_loss` those
    whose loss tensor's own node is alive, `reached` the earliest step this step's graph continues (-1: none),
    `mem` memory in use (bytes: the device allocator's, else the process's resident set), `retained`:
    backward(retain_graph=True) this step."""

    alive: int
    oldest: int
    kept_loss: int
    reached: int
    mem: float
    retained: bool


@dataclass
class StepRecord:
    """Everything observed for one training step. On unsampled steps `acts`/`inputs` hold only a
    finite-check value (float) per site instead of ActStats."""

    step: int
    sampled: bool
    loss: float | None = None  # the first loss series' value (see `losses`), kept for stats.jsonl
    losses: dict[str, float] = field(default_factory=dict)  # series (the trained root model) -> its loss this step
    acts: dict[tuple[str, str, str], Any] = field(default_factory=dict)  # (root, module, site) -> stats
    grads: dict[tuple[str, str], GradStats] = field(default_factory=dict)  # (root, module) -> stats
    norms: dict[tuple[str, str], NormStats] = field(default_factory=dict)  # (root, module) -> sampled steps only
    loss_calls: dict[str, LossCallStats] = field(default_factory=dict)  # loss name -> its first call, sampled steps
    manual_kept: float | None = None  # 1.0: a manual update's gradient was still there at the next backward
    resid: dict[tuple[str, str], ResidStats] = field(default_factory=dict)  # (root, block) -> sampled steps only
    attn: dict[tuple[str, str], AttnStats] = field(default_factory=dict)  # (root, module) -> sampled steps only
    loop: dict[int, LoopStats] = field(default_factory=dict)  # optimizer (in the order first checked) -> its interval
    graphs: GraphStats | None = None  # sampled steps: autograd graphs of earlier steps still alive
    samplers: dict[int, SamplerStats] = field(default_factory=dict)  # DistributedSamplers iterated in this step
    time: float | None = None  # when the step closed (perf_counter seconds): per-rank step times
    active: set[str] | None = None  # roots whose forward ran this step (None: unknown, judge all)
    # per optimizer stepped in this step, the (root, module) owners of its parameters (one shared, cached
    # collection per optimizer: read per sampled step, not copied per step)
    stepped: tuple[Collection[tuple[str, str]], ...] = ()
    tail: bool = False  # forward passes after the last step that made a NaN/Inf: observed, not a training step


@dataclass
class ModuleInfo:
    name: str
    type: str
    params: int  # trainable direct parameters (numel)
    weight_ndim2: bool  # owns a matrix/conv weight (gradient-depth analysis uses these)
    in_optimizer: bool = False
    init_gain: float | None = None  # its weight's std × sqrt(fan_in) when first seen (roots._init_gain)


@dataclass
class ModelInfo:
    """One root model: the outermost module called with gradients enabled."""

    name: str
    cls: str
    modules: dict[str, ModuleInfo] = field(default_factory=dict)  # observed modules only
    n_modules: int = 0
    n_params: int = 0
    order: list[str] = field(default_factory=list)  # observed modules in forward-call order
    wrappers: list[str] = field(default_factory=list)  # DDP, FSDP, torch.compile... around it, outermost first
    facts: dict[str, Any] = field(default_factory=dict)  # architecture facts (Root.facts): blocks, norms, attention


# ---- reasoner output ----


class Origin(BaseModel):
    module: str | None = None
    step: int | None = None
    root: str | None = None
    rank: int | None = None  # distributed runs: the rank where it began first


class Hypothesis(BaseModel):
    rank: int = 0
    kind: Kind
    confidence: float
    origin: Origin
    summary: str
    evidence: list[dict[str, Any]] = Field(default_factory=list)
    propagation: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)
    fixes: list[dict[str, Any]] = Field(default_factory=list)  # fixspec.fix(): applicable from outside the script
    caused_by: Kind | None = None
    because: str | None = None  # the trace evidence the caused_by link rests on
    ranks: list[int] | None = None  # distributed runs: the ranks that show it


class ModelSummary(BaseModel):
    name: str
    modules: int
    parameters: int


class Report(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(EXPLAIN_SCHEMA, alias="schema")
    run_dir: str
    status: str  # problems_found | healthy | no_training_observed
    steps_observed: int
    models: list[ModelSummary] = Field(default_factory=list)
    hypotheses: list[Hypothesis] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    run: dict[str, Any] = Field(default_factory=dict)  # exit status, cut short, script

    def to_json_dict(self) -> dict[str, Any]:
        """The contract's JSON; `ranks` and `origin.rank` only for a distributed run."""
        out = self.model_dump(by_alias=True, mode="json")
        for h in out["hypotheses"]:
            if h.get("because") is None:
                h.pop("because", None)
            if h.get("ranks") is None:
                h.pop("ranks", None)
                h["origin"].pop("rank", None)
        return out
