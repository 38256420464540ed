"""Same training, bit for bit: MLP (in-place ReLU, dropout), CNN (BatchNorm, dropout), 2-layer LSTM and a
transformer encoder trained with AdamW give identical parameters, buffers, optimizer state, eval output
and RNG state with and without neuraldbg (default sampling and --every 1: statistics on every step)."""
import pytest
import torch
from conftest import ASSETS, run_cli, run_python

MODELS = ["mlp", "cnn", "lstm", "transformer"]
_runs: dict = {}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{'plain' | 'default' | 'every1': results} — one process per variant trains all four models."""
    if not _runs:
        tmp = tmp_path_factory.mktemp("identical")
        r = run_python(ASSETS / "zoo_identical.py", tmp / "plain.pt", *MODELS)
        assert r.returncode == 0, r.stderr
        _runs["plain"] = torch.load(tmp / "plain.pt")
        for name, options in (("default", []), ("every1", ["--every", "1"])):
            r = run_cli("run", "--quiet", *options, "--run-dir", tmp / name, ASSETS / "zoo_identical.py",
                        tmp / f"{name}.pt", *MODELS)
            assert r.returncode == 0, r.stderr
            assert "internal error" not in r.stderr, r.stderr
            _runs[name] = torch.load(tmp / f"{name}.pt")
    return _runs


def _assert_equal(a, b, where):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_equal(a[k], b[k], f"{where}.{k}")
    else:
        assert a == b, where


@pytest.mark.parametrize("variant", ["default", "every1"])
@pytest.mark.parametrize("model", MODELS)
def test_bit_identical(trained, model, variant):
    plain, observed = trained["plain"][model], trained[variant][model]
    assert plain["state"], "nothing was trained"
    for part in ("state", "opt", "probe", "rng"):
        _assert_equal(plain[part], observed[part], f"{model}.{part}")
