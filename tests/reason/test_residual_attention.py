"""Residual blocks and attention layers: the probes (residprobe, attnprobe) against explicit computations, the
classifiers on hand-made statistics, the rules' advice, and real training scripts through the CLI
(tests/assets/resid_mlp.py, attn_lm.py: each fault with a healthy twin that must stay quiet)."""
import json
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from neuraldbg_cli.config import KNOWN_KINDS, Thresholds
from neuraldbg_cli.probe import attnprobe, residprobe
from neuraldbg_cli.reason.families.attention import attention_collapse, classify_attn
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.residual import classify_block, classify_stream, residual_imbalance
from neuraldbg_cli.trace.events import AttnStats, Kind, SemanticEvent

TH = Thresholds()


def _kinds(report, least=0.5):
    return {h["kind"]: h for h in report["hypotheses"] if h["confidence"] >= least}


# ---------------------------------------------------------------- classifiers


def test_dead_branch_is_judged_on_its_trend_not_its_start():
    assert classify_block(1e-6, None, True, TH) == "normal"  # too few samples: the trend is not known
    assert classify_block(1e-6, 1.1e-6, True, TH) == "dead_branch"  # stays at ~0 while it trains
    assert classify_block(0.0, 0.0, True, TH) == "dead_branch"  # multiplied by 0
    assert classify_block(5e-4, 1e-5, True, TH) == "normal"  # zero-initialised and growing (ReZero)
    assert classify_block(1e-4, 0.0, True, TH) == "normal"  # from exactly 0 to anything: growing
    assert classify_block(1e-6, 1e-6, False, TH) == "normal"  # nothing an optimizer trains: frozen on purpose
    assert classify_block(0.5, 0.4, True, TH) == "normal"


def test_swamping_branch_and_growing_stream():
    assert classify_block(25.0, None, True, TH) == "swamping"
    assert classify_block(5.0, 5.0, True, TH) == "normal"
    assert classify_stream(300.0, 20.0, TH.resid_window, TH) == "stream_growth"
    assert classify_stream(300.0, 250.0, TH.resid_window, TH) == "normal"  # large but not rising over training
    assert classify_stream(300.0, 20.0, 1, TH) == "normal"  # too few samples
    assert classify_stream(8.0, 1.0, TH.resid_window, TH) == "normal"


def _attn(max_logit, entropy_median):
    return AttnStats("sdpa", 4, 16, 32, max_logit, entropy_median, entropy_median)


def test_attention_collapse_needs_a_start_that_was_spread():
    assert classify_attn(_attn(80.0, 0.02), 0.95, 70.0, TH) == "collapsed"
    assert classify_attn(_attn(80.0, 0.02), 0.1, 70.0, TH) == "normal"  # sharp from its first sample: by design
    assert classify_attn(_attn(80.0, 0.4), 0.95, 30.0, TH) == "logit_growth"
    assert classify_attn(_attn(80.0, 0.4), 0.95, 75.0, TH) == "normal"  # large but not rising
    assert classify_attn(_attn(80.0, 0.4), 0.95, None, TH) == "normal"
    assert classify_attn(_attn(12.0, 0.6), 0.98, 3.0, TH) == "normal"  # healthy: sharpening, small logits
    assert classify_attn(_attn(math.nan, math.nan), 0.95, 30.0, TH) == "normal"  # non-finite: another family's


def test_new_kinds_are_judged_not_contract_only():
    assert {"residual_imbalance", "attention_collapse"} <= {k.value for k in Kind} <= KNOWN_KINDS


# ---------------------------------------------------------------- rules


def ev(type_, step, module, frm, to, site, **metrics):
    return SemanticEvent(type=type_, step=step, module=module, root="Net", from_=frm, to=to, site=site,
                         metrics=metrics)


def _models(norm):
    blocks = {f"blocks.{i}": {"type": "Block", "norm": norm} for i in range(3)}
    return [{"name": "Net", "order": list(blocks), "modules": {}, "facts": {"residual_blocks": blocks}}]


def test_swamping_advice_never_proposes_what_the_model_has():
    evs = [ev("residual_health", 3, f"blocks.{i}", "normal", "swamping", "residual", ratio=40.0) for i in range(3)]
    pre = residual_imbalance(Context(events=evs, models=_models("pre")))
    post = residual_imbalance(Context(events=evs, models=_models("post")))
    assert pre.kind == Kind.residual_imbalance and "40x" in pre.summary and pre.origin.module == "blocks.0"
    assert not any("Pre-LN" in s for s in pre.suggestions) and any("sqrt(2 * n_layers)" in s for s in pre.suggestions)
    assert any("Pre-LN" in s for s in post.suggestions)


def test_attention_rule_reports_the_numbers():
    evs = [ev("attention_health", 5, "blocks.0.attn", "normal", "collapsed", "attention", max_logit=80.0,
              entropy_median=0.02, start_entropy=0.97)]
    h = attention_collapse(Context(events=evs, optimizers=[{"type": "Adam", "groups": [{"lr": 0.1}]}]))
    assert h.kind == Kind.attention_collapse and h.confidence >= 0.5 and h.origin.step == 5
    assert "80" in h.summary and "0.02" in h.summary and "0.97" in h.summary
    text = " ".join(h.suggestions)
    assert "QK-norm" in text and "soft-capping" in text and "lr=0.1" in text and "warm" in text


# ---------------------------------------------------------------- probes


def _explicit(q, k, allowed, scale):
    z = (q @ k.transpose(-2, -1)) * scale
    p = torch.softmax(z.masked_fill(~allowed, -math.inf), -1)
    ent = -(p * p.clamp_min(1e-30).log()).sum(-1)
    n = allowed.sum(-1).float().expand_as(ent)
    keep = n > 1
    norm = ent[keep] / n[keep].log()
    return z.masked_fill(~allowed, -math.inf).max(), norm.mean(), norm.median()


def test_sdpa_recomputation_matches_the_attention_weights():
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 40, 8) * 2 for _ in range(3))
    vals, lay = attnprobe.sdpa_values((q, k, v), {"is_causal": True})
    assert (lay.source, lay.heads, lay.rows, lay.keys) == ("sdpa", 2, 16, 40)
    idx = attnprobe._rows(40, q.device)
    assert idx[-1] == 39 and idx[0] == 0
    allowed = idx[:, None] >= torch.arange(40)[None, :]
    want = _explicit(q[:2].index_select(-2, idx), k[:2], allowed, 1 / math.sqrt(8))
    for got, exp in zip(vals, want):
        assert got.item() == pytest.approx(exp.item(), rel=1e-5)
    mask = torch.rand(3, 1, 40, 40) > 0.3  # True attends (sdpa's convention)
    mask[..., 0] = True
    vals, _ = attnprobe.sdpa_values((q, k, v, mask), {"scale": 0.5})
    want = _explicit(q[:2].index_select(-2, idx), k[:2], mask[:2].index_select(-2, idx), 0.5)
    for got, exp in zip(vals, want):
        assert got.item() == pytest.approx(exp.item(), rel=1e-5)


def test_mha_recomputation_matches_its_own_weights():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 20, 16)
    mask = nn.Transformer.generate_square_subsequent_mask(20)
    seen = []
    orig = F.multi_head_attention_forward

    def spy(*args, **kwargs):
        seen.append(attnprobe.mha_values(args, kwargs))
        return orig(*args, **kwargs)

    F.multi_head_attention_forward = spy
    try:
        _, w = mha(x, x, x, attn_mask=mask, average_attn_weights=False)  # (N, H, L, S)
    finally:
        F.multi_head_attention_forward = orig
    vals, lay = seen[0]
    assert (lay.source, lay.heads, lay.keys) == ("mha", 4, 20)
    idx = attnprobe._rows(20, x.device)
    p = w.detach().index_select(2, idx)
    ent = -(p * p.clamp_min(1e-30).log()).sum(-1)
    n = (idx + 1).float()  # causal: row i attends to i + 1 keys
    norm = (ent / n.log())[:, :, n > 1]
    assert vals[1].item() == pytest.approx(norm.mean().item(), rel=1e-4)
    assert vals[2].item() == pytest.approx(norm.median().item(), rel=1e-4)


def _run(module, x):
    x = x.requires_grad_() if not x.requires_grad else x
    h = x * 1.0  # a non-leaf input, as inside a model
    return residprobe.values(module, h, module(h))


class _PreLN(nn.Module):
    def __init__(self, d, scale=1.0):
        super().__init__()
        self.norm, self.fc, self.scale = nn.LayerNorm(d), nn.Linear(d, d), scale

    def forward(self, x):
        return x + self.scale * self.fc(self.norm(x))


class _ResNetLike(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        out = self.fc(x)
        out += x
        return torch.relu(out)


def test_residual_blocks_are_found_from_the_graph():
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    vals, lay = _run(_PreLN(16, scale=0.5), x)
    assert (lay.norm, lay.found, lay.measured) == ("pre", "graph", True)
    skip, branch, out = (v.item() for v in vals)
    assert skip == pytest.approx(x.pow(2).mean().sqrt().item(), rel=1e-5) and 0 < branch < skip
    assert _run(_ResNetLike(16), x)[1].norm == "none"
    assert _run(nn.Sequential(nn.Linear(16, 16), nn.ReLU()), x) is None  # same shape, no skip
    pre = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
    post = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    seq = torch.randn(2, 5, 16)
    assert _run(pre, seq)[1][:3] == ("TransformerEncoderLayer", "pre", "graph")
    vals, lay = _run(post, seq)
    assert (lay.norm, lay.measured, vals) == ("post", False, [])


# ---------------------------------------------------------------- real scripts through the CLI


def test_residual_branch_scaled_to_nothing(observe):
    obs = observe("resid_mlp.py", "--mode", "dead")
    assert obs.proc.returncode == 0, obs.proc.stderr
    top = obs.top
    assert top["kind"] == "residual_imbalance" and top["confidence"] >= 0.7, obs.report["hypotheses"]
    assert top["origin"]["module"] == "1" and top["origin"]["step"] == 0
    assert set(top["propagation"]) == {"1", "2", "3", "4"}
    assert "adds nothing" in top["summary"] and any("not multiplied by 0" in s for s in top["suggestions"])
    facts = json.loads((obs.run_dir / "model.json").read_text())["models"][0]["facts"]
    assert facts["residual_blocks"]["1"] == {"type": "Block", "norm": "pre"}
    assert facts["norm_types"] == ["LayerNorm"] and facts["activation_types"] == ["GELU"]


@pytest.mark.parametrize("mode", ["healthy", "rezero", "zero_gain"])
def test_residual_twins_are_quiet(observe, mode):
    obs = observe("resid_mlp.py", "--mode", mode)
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert "residual_imbalance" not in _kinds(obs.report, 0.0), obs.report["hypotheses"]
    assert obs.report["status"] == "healthy", obs.report["hypotheses"]


def test_attention_logits_blow_up_and_rows_collapse(observe):
    obs = observe("attn_lm.py", "--mode", "collapse")
    assert obs.proc.returncode == 0, obs.proc.stderr
    top = obs.top
    assert top["kind"] == "attention_collapse" and top["confidence"] >= 0.7, obs.report["hypotheses"]
    assert top["origin"]["module"] in {"blocks.0.attn", "blocks.1.attn"} and top["origin"]["step"] <= 10
    assert "one key" in top["summary"] and any("QK-norm" in s for s in top["suggestions"])
    facts = json.loads((obs.run_dir / "model.json").read_text())["models"][0]["facts"]
    assert facts["attention"]["blocks.0.attn"]["call"] == "sdpa"
    assert facts["residual_blocks"]["blocks.0"]["norm"] == "pre"
    # two groups (q/k at lr 0.1), Adam's defaults, a constant lr
    assert facts["optimizers"] == [{"type": "Adam", "lr": 0.1, "betas": [0.9, 0.999], "weight_decay": [0],
                                    "warmup": False}]


def test_pre_ln_transformer_with_warmup_is_quiet(observe):
    obs = observe("attn_lm.py", "--mode", "healthy")
    assert obs.proc.returncode == 0, obs.proc.stderr
    facts = json.loads((obs.run_dir / "model.json").read_text())["models"][0]["facts"]
    assert facts["optimizers"] == [{"type": "AdamW", "lr": 3e-3, "betas": [0.9, 0.999], "weight_decay": [0.1],
                                    "warmup": True}]
    kinds = _kinds(obs.report, 0.0)
    assert "attention_collapse" not in kinds and "residual_imbalance" not in kinds, obs.report["hypotheses"]
    assert obs.report["status"] == "healthy", obs.report["hypotheses"]


def test_gpt_with_weight_tied_embeddings_is_quiet(observe):
    """One parameter in two modules (the token embedding and the output head, as GPT-2 and nanoGPT tie them)."""
    obs = observe("attn_lm.py", "--mode", "tied")
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert obs.report["status"] == "healthy" and not obs.report["hypotheses"], obs.report["hypotheses"]
