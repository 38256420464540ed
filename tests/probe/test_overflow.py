"""The tool's own statistics are overflow-safe: finite values whose squares overflow (float32 ~1e23, float16 ~1e3)
give no `non_finite` event or hypothesis, through the real CLI; a real NaN/Inf still does (test_tensorstats,
test_probes, the non-finite scenarios)."""
import json
import math
from pathlib import Path

import pytest
import torch

from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.probe.records import StepBuffer
from conftest import explain_json, run_cli

ASSET = Path(__file__).parent.parent / "assets" / "huge_but_finite.py"


@pytest.mark.parametrize("kind", ["fp32", "fp16", "bf16"])
def test_huge_finite_values_are_not_non_finite(tmp_path, kind):
    run_dir = tmp_path / "trace"
    proc = run_cli("run", "--quiet", "--run-dir", run_dir, ASSET, kind)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["type"] == "non_finite" or "non_finite" in (e.get("from"), e.get("to"))]
    report = explain_json(run_dir)
    assert report["steps_observed"] == 12
    assert "non_finite" not in {h["kind"] for h in report["hypotheses"]}
    rows = [json.loads(line) for line in (run_dir / "stats.jsonl").read_text().splitlines()]
    norms = [v[0] for r in rows for v in r.get("grads", {}).values() if v[0] is not None]
    assert norms and all(math.isfinite(v) for v in norms)


def test_norms_and_sums_of_squares_do_not_overflow():
    big = torch.full((1000,), 1e23)
    half = torch.full((1000,), 3000.0, dtype=torch.float16)
    n = ts.host_values(ts.norms([big, half, torch.tensor([1.0, math.inf]), torch.tensor([math.nan])]))
    assert n[0] == pytest.approx(1e23 * 1000**0.5, rel=1e-6) and n[1] == pytest.approx(3000 * 1000**0.5, rel=1e-3)
    assert n[2] == math.inf and math.isnan(n[3])
    # on the CPU a site's float32 sums are checked once per step, for all sites (StepBuffer.check_sums)
    buf = StepBuffer(0, True)
    for x in (big.view(10, 100), torch.ones(10, 100)):
        values, lay = ts.full(x, ts.DEAD)
        buf.add_full(("m", "layer", "activation"), values, lay, x)
    assert math.isinf(buf.parts[1].item())  # the float32 sum of squares overflowed, not yet checked
    buf.check_sums()
    stats = ts.act_stats(ts.host_values(buf.parts[: len(values)]), lay)
    assert stats.mean == pytest.approx(1e23, rel=1e-6) and stats.nonfinite == 0.0 and math.isfinite(stats.std)
    assert buf.parts[len(values)].dtype is torch.float32  # a site that did not overflow keeps its float32 sums
    values, lay = ts.full(big, ts.EXACT)
    stats = ts.act_stats(ts.host_values(values), lay)
    assert stats.std == pytest.approx(0.0, abs=1e17) and stats.nonfinite == 0
    ordinary = torch.randn(1000)  # ordinary values: the float32 result, bit for bit
    assert ts.norms([ordinary])[0].item() == torch.linalg.vector_norm(ordinary).item()


def test_norm_vector_recomputes_an_overflowed_norm_beside_a_nan():
    """One sum tells whether a vector of norms needs the per-norm path: a NaN beside an overflowed norm (a blown-up
    model: one layer NaN, another 1e22) must not hide the overflow."""
    from neuraldbg_cli.probe import tensorstats as ts

    vec = ts.norm_vector([torch.full((4,), float("nan")), torch.full((100,), 1e22), torch.ones(3)])
    assert math.isnan(vec[0].item()) and vec[1].item() == pytest.approx(1e23, rel=1e-6) and vec[2].item() == pytest.approx(3 ** 0.5)
