"""Shared, torch-free vocabulary about PyTorch module and optimizer types (class names as strings), so that the
probes, the monitor and the reasoner agree on what a normalisation layer or a saturating activation is. Each
table is written once here; tensorstats and roots derive what to measure from it, rules what to advise."""

from __future__ import annotations

# normalisation layers of torch.nn (their output scale is what they control)
NORM_TYPES = frozenset(
    {
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "SyncBatchNorm",
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
        "LayerNorm",
        "GroupNorm",
        "RMSNorm",
        "InstanceNorm1d",
        "InstanceNorm2d",
        "InstanceNorm3d",
        "LazyInstanceNorm1d",
        "LazyInstanceNorm2d",
        "LazyInstanceNorm3d",
        "LocalResponseNorm",
        "CrossMapLRN2d",
    }
)
# activations that output exact zeros below a threshold: their units can die
RELU_TYPES = frozenset({"ReLU", "ReLU6", "Threshold", "RReLU"})
# bounded activations: their derivative is <= 0.25 (sigmoid) or 0 at the rails. Judged at the rails 0 and 1
# (SAT01), -1 and 1 (SAT11), or both where the range is neither
SAT01_TYPES = frozenset({"Sigmoid", "Hardsigmoid", "LogSigmoid", "Tanhshrink"})
SAT11_TYPES = frozenset({"Tanh", "Hardtanh", "Softsign", "LogSigmoid", "Tanhshrink"})
SATURATING_TYPES = SAT01_TYPES | SAT11_TYPES
# unbounded smooth (or leaky) activations: He (Kaiming) init is made for them, as for ReLU
SMOOTH_TYPES = frozenset({"LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Hardswish"})
# modules whose output is finite whenever their input is
FINITE_PRESERVING_TYPES = (
    RELU_TYPES
    | SATURATING_TYPES
    | SMOOTH_TYPES
    | {
        "Softplus",
        "Softshrink",
        "Hardshrink",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "FeatureAlphaDropout",
        "Identity",
        "Flatten",
        "Unflatten",
        "MaxPool1d",
        "MaxPool2d",
        "MaxPool3d",
        "AdaptiveMaxPool1d",
        "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d",
        "Softmax",
        "Softmax2d",
        "LogSoftmax",
        "Softmin",
    }
)
# activation functions (torch.nn's), for the model's description
ACTIVATION_TYPES = SATURATING_TYPES | RELU_TYPES | SMOOTH_TYPES | {"PReLU", "Softplus", "GLU"}
# lookup tables: their weight is a table of rows, not a matrix that multiplies (no gradient-depth analysis),
# and their gradient can be sparse
EMBEDDING_TYPES = frozenset({"Embedding", "EmbeddingBag"})
RNN_TYPES = frozenset({"RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"})
# layers the `reinit` fix is offered for: a weight matrix or kernel that multiplies, whose init sets the scale
INIT_TYPES = frozenset({"Linear", *(f"{base}{d}d" for base in ("Conv", "ConvTranspose") for d in (1, 2, 3))})
# unbounded activations He (Kaiming) init is made for; a model without them (tanh/sigmoid, or activations called
# as functions, which its modules do not show) is offered Glorot (Xavier), the smaller of the two
HE_INIT_TYPES = RELU_TYPES | SMOOTH_TYPES | {"PReLU"}
# modules that carry their own normalisation and residual connections (torch.nn's transformer blocks)
RESIDUAL_NORM_BLOCKS = frozenset(
    {"TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder", "Transformer"}
)
# a model that ends in one of these outputs probabilities, not the logits nn.CrossEntropyLoss expects
SOFTMAX_TYPES = frozenset({"Softmax", "LogSoftmax"})

# Where an activation's units (channels, features) lie, from the type of the layer it follows: dim 1 of
# (N, C, ...), or the last dim of (..., features)
CHANNEL_FIRST_TYPES = frozenset(
    {
        f"{base}{d}d"
        for d in (1, 2, 3)
        for base in (
            "Conv",
            "ConvTranspose",
            "LazyConv",
            "LazyConvTranspose",
            "BatchNorm",
            "LazyBatchNorm",
            "InstanceNorm",
            "LazyInstanceNorm",
            "MaxPool",
            "AvgPool",
            "AdaptiveMaxPool",
            "AdaptiveAvgPool",
            "LPPool",
            "FractionalMaxPool",
            "Dropout",
            "ReflectionPad",
            "ReplicationPad",
            "ZeroPad",
            "ConstantPad",
            "CircularPad",
            "MaxUnpool",
        )
    }
    | {
        "SyncBatchNorm",
        "GroupNorm",
        "LocalResponseNorm",
        "Upsample",
        "UpsamplingNearest2d",
        "UpsamplingBilinear2d",
        "PixelShuffle",
        "PixelUnshuffle",
        "ChannelShuffle",
        "Softmax2d",
    }
)
# (HF's GPT-2 `Conv1D` is a Linear with its weight transposed: features last)
FEATURES_LAST_TYPES = (
    EMBEDDING_TYPES
    | {"RNN", "LSTM", "GRU"}
    | {
        "Linear",
        "LazyLinear",
        "Bilinear",
        "LayerNorm",
        "RMSNorm",
        "MultiheadAttention",
        "TransformerEncoderLayer",
        "TransformerDecoderLayer",
        "Conv1D",
        "NonDynamicallyQuantizableLinear",
    }
)


def is_norm(type_name: str) -> bool:
    """A normalisation layer: torch.nn's, or a library's own class named like one (LlamaRMSNorm, T5LayerNorm,
    FusedLayerNorm, BertLayerNorm...)."""
    return type_name in NORM_TYPES or type_name.endswith(("Norm", "Norm1d", "Norm2d", "Norm3d"))


def is_residual(type_name: str) -> bool:
    """A block that carries skip connections: torch.nn's transformer layers, or a class named like a residual
    block (ResNet's BasicBlock/Bottleneck, GPT2Block, BertLayer's *EncoderLayer...)."""
    return type_name in RESIDUAL_NORM_BLOCKS or type_name.endswith(
        ("Block", "Bottleneck", "EncoderLayer", "DecoderLayer", "Residual")
    )


# The learning rate each optimizer family is usually run at (torch defaults and common practice); a value
# within a factor `Thresholds.lr_usual_span` of it is "in the usual range". Matched on the lower-cased class
# name: exact first, then prefix (AdamW, NAdam... are "adam"-like), then the default.
USUAL_LR_EXACT = {
    "sgd": 1e-2,
    "asgd": 1e-2,
    "adadelta": 1.0,
    "lbfgs": 1.0,
    "adagrad": 1e-2,
    "rmsprop": 1e-2,
    "rprop": 1e-2,
    "adamax": 2e-3,
    "sparseadam": 1e-3,
    "lion": 1e-4,
    "adafactor": 1e-3,
}
USUAL_LR_PREFIX = (
    ("adam", 1e-3),
    ("nadam", 2e-3),
    ("radam", 1e-3),
    ("fusedadam", 1e-3),
    ("lamb", 1e-3),
    ("lion", 1e-4),
    ("sgd", 1e-2),
)
USUAL_LR_DEFAULT = 1e-3


def usual_lr(optimizer_type: str) -> float:
    name = optimizer_type.lower()
    if name in USUAL_LR_EXACT:
        return USUAL_LR_EXACT[name]
    return next((lr for prefix, lr in USUAL_LR_PREFIX if name.startswith(prefix)), USUAL_LR_DEFAULT)


# optimizers whose weight_decay is decoupled from the gradient (AdamW-style, usually 0.01-0.1), unlike an L2 term
# added to the gradient (SGD, Adam: usually 1e-5-5e-4). Matched on the lower-cased class name, or its prefix
DECOUPLED_DECAY_EXACT = frozenset({"adamw", "lion", "adafactor"})
DECOUPLED_DECAY_PREFIX = ("fused",)


def decoupled_decay(optimizer_type: str) -> bool:
    name = optimizer_type.lower()
    return name in DECOUPLED_DECAY_EXACT or name.startswith(DECOUPLED_DECAY_PREFIX)


# optimizers whose step is normalised per parameter by a running scale of its gradient (Adam's family, RMSprop,
# Adagrad, Adadelta, Adafactor) or by its sign (Lion, Rprop): a gradient's size alone does not size the step
ADAPTIVE_PREFIX = (
    "adam",
    "nadam",
    "radam",
    "fusedadam",
    "lamb",
    "lion",
    "rmsprop",
    "adagrad",
    "adadelta",
    "adafactor",
    "rprop",
    "sparseadam",
)


def adaptive(optimizer_type: str) -> bool:
    return optimizer_type.lower().startswith(ADAPTIVE_PREFIX)


# a learning-rate schedule warms up when some group's lr rises first (its first change is upward) to at least this
# factor of its first value: linear/LambdaLR warm-ups, OneCycle (max_lr / 25 at first); not a constant lr, a decay,
# nor restarts that begin by decaying
WARMUP_RISE = 2.0


def warms_up(points: list[list[float]]) -> bool:
    """points: [step, lr of each group] where the lr changed, in step order (model.json's lr_at)."""
    for i in range(1, len(points[0]) if points else 0):
        lrs = [abs(p[i]) for p in points]
        changes = [b - a for a, b in zip(lrs, lrs[1:]) if b != a]
        if changes and changes[0] > 0 and max(lrs) >= WARMUP_RISE * lrs[0]:
            return True
    return False
