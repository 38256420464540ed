"""Step counts on real-world layouts from scripts/scenarios_real, through the real CLI: gradient accumulation
under the HF Trainer and Lightning, and LBFGS with a closure, are counted in optimizer steps. The expected count
is the one the script itself prints (the Trainer's global_step, one "STEP:" line per LBFGS step) and the one
the plain run gave when the labels were written."""
import importlib.util
import re

import pytest
from conftest import ROOT, explain_json, run_cli

SUITE = ROOT / "scripts" / "scenarios_real"


def need(*modules: str) -> None:
    """Skip, saying what is missing, when the integrations extra is not installed (an import would cost seconds)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}: pip install -e '.[integrations]'")


def observed_steps(tmp_path, script: str, *args: str) -> tuple[int, str]:
    run_dir = tmp_path / "trace"
    proc = run_cli("run", "--quiet", "--run-dir", run_dir, SUITE / script, *args, cwd=tmp_path, timeout=240,
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return explain_json(run_dir)["steps_observed"], proc.stdout


def test_hf_trainer_gradient_accumulation_counts_optimizer_steps(tmp_path):
    need("transformers", "accelerate")
    steps, out = observed_steps(tmp_path, "hf_bert_trainer_ga2_healthy.py", "--epochs", "1")
    # 1280 examples / 16 per micro-batch / 2 micro-batches per step
    assert int(re.findall(r"global_step (\d+)", out)[-1]) == 40
    assert steps == 40


def test_lightning_accumulate_grad_batches_counts_optimizer_steps(tmp_path):
    need("lightning")
    steps, out = observed_steps(tmp_path, "pl_accumulate2_healthy.py", "--max-epochs", "1")
    # 48 batches of 32 / accumulate_grad_batches=2
    assert int(re.findall(r"global_step (\d+)", out)[-1]) == 24
    assert steps == 24


def test_lbfgs_closure_is_one_step_per_optimizer_step(tmp_path):
    steps, out = observed_steps(tmp_path, "lbfgs_closure_healthy.py", "--steps", "3")
    closure_calls = int(re.search(r"after (\d+) closure calls", out).group(1))
    assert len(re.findall(r"^STEP: \d+", out, re.M)) == 3 and closure_calls > 3
    assert steps == 3
