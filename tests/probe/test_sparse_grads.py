"""Sparse embedding gradients (nn.EmbeddingBag(sparse=True) trained by torch.optim.SparseAdam, the NCF/DLRM
layout) are read from their values: a table whose rows a batch touched receives a gradient. Through the real CLI,
against a control whose embedding output is detached (a real no-gradient bug)."""
from conftest import explain_json, run_cli

SCRIPT = """
import sys
import torch
import torch.nn as nn

torch.manual_seed(0)
DETACH = sys.argv[1] == "detach"


class Rec(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(2000, 8, mode="sum", sparse=True)
        self.mlp = nn.Sequential(nn.Linear(8 + 4, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense, ids):
        e = self.emb(ids, torch.arange(len(ids)))
        if DETACH:
            e = e.detach()
        return self.mlp(torch.cat([e, dense], 1)).squeeze(1)


g = torch.Generator().manual_seed(1)
hidden = torch.randn(2000, generator=g)
model = Rec()
opts = [torch.optim.SparseAdam(list(model.emb.parameters()), lr=1e-2),
        torch.optim.Adam(list(model.mlp.parameters()), lr=1e-2)]
for step in range(40):
    ids = torch.randint(0, 2000, (128,), generator=g)
    dense = torch.randn(128, 4, generator=g)
    y = (hidden[ids] + dense[:, 0] > 0).float()
    loss = nn.functional.binary_cross_entropy_with_logits(model(dense, ids), y)
    for o in opts:
        o.zero_grad()
    loss.backward()
    for o in opts:
        o.step()
"""


def _run(tmp_path, mode):
    script = tmp_path / "rec.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / mode
    proc = run_cli("run", "--quiet", "--run-dir", run_dir, script, mode, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return explain_json(run_dir)


def test_sparse_embedding_gradient_is_a_gradient(tmp_path):
    report = _run(tmp_path, "sparse")
    assert report["steps_observed"] == 40  # two optimizers stepped together: one step
    no_grad = [h for h in report["hypotheses"] if h["kind"] == "no_gradient"]
    assert not no_grad, no_grad
    assert not [h for h in report["hypotheses"] if h["confidence"] >= 0.5], report["hypotheses"]


def test_detached_sparse_embedding_still_has_no_gradient(tmp_path):
    report = _run(tmp_path, "detach")
    top = report["hypotheses"][0]
    assert top["kind"] in ("no_gradient", "unchanged_weights") and top["confidence"] >= 0.5, top
    assert top["origin"]["module"] == "emb"
