"""A layer far below the largest gradient is vanishing only when the layers before it (nearer the input) are not
far above it: in a U-Net the bottleneck's gradient is tiny while the first convolutions get theirs through the
skip concatenations (the input is not starved), whereas a gradient vanishing toward the input leaves every
earlier layer smaller still."""
from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.gradient_observer import GradientObserver, classify_gradient
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.trace.events import ModelInfo, ModuleInfo

TH = Thresholds()


def test_a_layer_the_input_side_bypasses_is_not_vanishing():
    # bottleneck conv at 1e-5 of the output conv; the first conv (upstream) gets 4000x the bottleneck's
    assert classify_gradient(1.1e-5, 0.15, None, True, 19, TH, upstream=4.6e-2) == "healthy"


def test_a_gradient_vanishing_toward_the_input_still_vanishes():
    # a deep sigmoid chain: every earlier layer smaller still (upstream below this one)
    assert classify_gradient(1e-6, 0.1, None, True, 8, TH, upstream=5e-7) == "vanishing"
    # upstream only a little above (per-element noise of a small first layer): still vanishing
    assert classify_gradient(1e-6, 0.1, None, True, 8, TH, upstream=3e-6) == "vanishing"
    assert classify_gradient(1e-6, 0.1, None, True, 8, TH) == "vanishing"


def test_upstream_is_the_largest_earlier_matrix_layer_in_forward_order():
    names = ["inc", "act", "down", "mid", "up", "out"]
    model = ModelInfo(name="Net", cls="Net", order=names)
    model.modules = {n: ModuleInfo(n, "Conv2d", 10, n != "act") for n in names}
    obs = GradientObserver(Monitor(TH, lambda e: None))
    rms = {"inc": 1e-2, "act": 5.0, "down": 1e-3, "mid": 1e-6, "up": 1e-4, "out": 1e-1}
    up = obs._upstream(model, rms)
    assert "inc" not in up  # nothing runs before the first layer
    assert up == {"down": 1e-2, "mid": 1e-2, "up": 1e-2, "out": 1e-2}  # the non-matrix "act" is not a layer
