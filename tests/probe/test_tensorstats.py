"""The on-device statistics against plain definitions: what the monitor judges must mean what it says."""
import math

import torch

from neuraldbg_cli.probe import tensorstats as ts


def checksums(views):
    c = ts.checksums(views)  # one vector, or 0-d parts when widths differ
    return ts.host_values(c if isinstance(c, list) else [c])


def test_checksum_sees_a_one_ulp_change_anywhere():
    ps = [torch.randn(300, 200), torch.randn(7), torch.randn(5, dtype=torch.float64), torch.randn(9).half()]
    views = ts.bit_views(ps)
    before = checksums(views)
    assert checksums(views) == before  # deterministic
    for p in ps:
        i = p.numel() - 1
        p.view(-1)[i] = torch.nextafter(p.view(-1)[i], torch.tensor(math.inf, dtype=p.dtype))
        after = checksums(views)
        assert after != before
        before = after


def test_checksum_of_float64_made_from_float32_is_not_constant():
    p = torch.randn(64).double()  # zero low mantissa bits: a 24-bit sum of the raw bits would be 0
    views = ts.bit_views([p])
    first = checksums(views)
    p.mul_(2)
    assert checksums(views) != first


def test_sample_is_a_spread_view():
    x = torch.arange(1 << 20, dtype=torch.float32)
    part = ts.sample(x)
    assert part.numel() == ts.SAMPLE and part.data_ptr() == x.data_ptr()  # a view, no copy
    assert part.max() > 0.95 * x.numel()  # reaches the end, not just a prefix
    small = torch.randn(1000)
    assert ts.sample(small) is small


def test_activation_fractions_on_the_sample_match_the_whole():
    torch.manual_seed(0)
    x = torch.relu(torch.randn(64, 512, 32) - 0.5).sigmoid()  # big: sampled
    values, lay = ts.full(x, ts.DEAD | ts.SAT01)
    s = ts.act_stats(torch.stack(values).tolist(), lay)
    exact_sat = ((x - 0.5).abs() > 0.48).float().mean().item()
    assert lay.sampled == ts.SAMPLE < lay.n
    assert abs(s.sat01 - exact_sat) < 0.02
    assert math.isclose(s.mean, x.mean().item(), rel_tol=1e-4) and math.isclose(s.std, x.std(unbiased=False).item(), rel_tol=1e-3)
    assert s.max == x.max().item()  # exact: from the per-unit peaks


def test_layer_outputs_keep_mean_and_std_and_flag_non_finite():
    x = torch.randn(32, 100)
    s = ts.act_stats(torch.stack(ts.full(x, 0)[0]).tolist(), ts.full(x, 0)[1])
    assert math.isnan(s.min) and s.nonfinite == 0 and math.isclose(s.mean, x.mean().item(), abs_tol=1e-6)
    x[3, 4] = math.nan
    values, lay = ts.full(x, 0)
    assert ts.act_stats(torch.stack(values).tolist(), lay).nonfinite == 1.0


def test_input_data_counts_non_finite_exactly():
    x = torch.randn(10, 10)
    x[0, :3] = math.inf
    values, lay = ts.full(x, ts.EXACT)
    assert ts.act_stats(torch.stack(values).tolist(), lay).nonfinite == 3


def test_host_values_keep_the_parts_order_with_a_vector_among_them():
    parts = [torch.tensor(1.0), torch.tensor([2.0, 3.0]), torch.tensor(4.0), torch.tensor([5.0])]
    assert ts.host_values(parts) == [1.0, 2.0, 3.0, 4.0, 5.0]


def _dead_frac(x, layer_type):
    values, lay = ts.full(x, ts.DEAD | ts.SAT | ts.unit_axis_flags(layer_type))
    return ts.act_stats(torch.stack(values).tolist(), lay).dead_frac, lay.units


def test_dead_units_are_channels_after_a_conv_and_features_after_a_linear():
    """(N, C, ...) after Conv*/BatchNorm*/GroupNorm, (..., features) after Linear, whatever the rank:
    7 of 8 Conv1d channels forced dead read 0.875, not 0.0 along the length axis."""
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(4, 8, 3)
    with torch.no_grad():
        conv.bias[:7] = -100.0
        y = torch.relu(conv(torch.randn(16, 4, 32)))
    assert _dead_frac(y, "Conv1d") == (0.875, 8)
    assert _dead_frac(y, "BatchNorm1d") == (0.875, 8)
    conv3 = torch.nn.Conv3d(2, 8, 1)
    with torch.no_grad():
        conv3.bias[:6] = -100.0
        y3 = torch.relu(conv3(torch.randn(2, 2, 3, 4, 5)))
    assert _dead_frac(y3, "Conv3d") == (0.75, 8)
    lin = torch.nn.Linear(6, 8)  # on a 4-d (N, H, W, C) input, as in a channels-last MLP block
    with torch.no_grad():
        lin.bias[:4] = -100.0
        z = torch.relu(lin(torch.randn(2, 5, 5, 6)))
    assert _dead_frac(z, "Linear") == (0.5, 8)
    assert _dead_frac(z, "Conv1D") == (0.5, 8)  # HF GPT-2's Conv1D is a Linear: features last
    assert _dead_frac(y3, None) == (0.75, 8)  # an unknown layer: an image-like map's channels are dim 1


def test_host_values_keep_the_parts_order_whatever_their_mix():
    """0-d parts are stacked and 1-d ones appended in the one transfer; the values come back in the parts' order."""
    import random

    rng = random.Random(0)
    for _ in range(100):
        parts, expect = [], []
        for _ in range(rng.randint(1, 30)):  # over FEW_PARTS mostly: the stacked path
            if rng.random() < 0.6:
                t = torch.tensor(rng.random())
            else:
                t = torch.rand(rng.randint(1, 5), *([1] if rng.random() < 0.5 else []))
            parts.append(t)
            expect += t.reshape(-1).tolist()
        assert ts.host_values(parts) == expect
