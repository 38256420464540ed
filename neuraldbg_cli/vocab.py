"""Shared, torch-free vocabulary about PyTorch module and optimizer types (class names as strings), so that the
probes, the monitor and the reasoner agree on what a normalisation layer or a saturating activation is."""
from __future__ import annotations

# normalisation layers of torch.nn (their output scale is what they control)
NORM_TYPES = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d",
                        "LazyBatchNorm2d", "LazyBatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm",
                        "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d",
                        "LazyInstanceNorm2d", "LazyInstanceNorm3d", "LocalResponseNorm", "CrossMapLRN2d"})
# bounded activations: their derivative is <= 0.25 (sigmoid) or 0 at the rails
SATURATING_TYPES = frozenset({"Sigmoid", "Tanh", "Hardtanh", "Softsign", "Hardsigmoid", "LogSigmoid", "Tanhshrink"})
RNN_TYPES = frozenset({"RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"})
# modules that carry their own normalisation and residual connections (torch.nn's transformer blocks)
RESIDUAL_NORM_BLOCKS = frozenset({"TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                                  "TransformerDecoder", "Transformer"})


def is_norm(type_name: str) -> bool:
    """A normalisation layer: torch.nn's, or a library's own class named like one (LlamaRMSNorm, T5LayerNorm,
    FusedLayerNorm, BertLayerNorm...)."""
    return type_name in NORM_TYPES or type_name.endswith(("Norm", "Norm1d", "Norm2d", "Norm3d"))


# The learning rate each optimizer family is usually run at (torch defaults and common practice); a value
# within a factor `Thresholds.lr_usual_span` of it is "in the usual range". Matched on the lower-cased class
# name: exact first, then prefix (AdamW, NAdam... are "adam"-like), then the default.
USUAL_LR_EXACT = {"sgd": 1e-2, "asgd": 1e-2, "adadelta": 1.0, "lbfgs": 1.0, "adagrad": 1e-2, "rmsprop": 1e-2,
                  "rprop": 1e-2, "adamax": 2e-3, "sparseadam": 1e-3, "lion": 1e-4, "adafactor": 1e-3}
USUAL_LR_PREFIX = (("adam", 1e-3), ("nadam", 2e-3), ("radam", 1e-3), ("fusedadam", 1e-3), ("lamb", 1e-3),
                   ("lion", 1e-4), ("sgd", 1e-2))
USUAL_LR_DEFAULT = 1e-3


def usual_lr(optimizer_type: str) -> float:
    name = optimizer_type.lower()
    if name in USUAL_LR_EXACT:
        return USUAL_LR_EXACT[name]
    return next((lr for prefix, lr in USUAL_LR_PREFIX if name.startswith(prefix)), USUAL_LR_DEFAULT)
