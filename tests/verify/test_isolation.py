"""Trials that always run, in isolation: unmodified checkpoint savers (timm's hard links, copies and os.replace;
Hugging Face Trainer's save_total_limit rotation of checkpoint folders) verify end to end through the CLI, under
each isolation this machine offers, and the user's folder is byte-identical afterwards, nothing added to it."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import ASSETS, run_cli


def _state(folder: Path) -> dict[str, tuple]:
    """Every file's content, mtime and mode, and every folder, under `folder`."""
    out: dict[str, tuple] = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[str(p.relative_to(folder))] = (digest, st.st_mtime_ns, st.st_mode, st.st_nlink)
    return out


def _isolations() -> list[str]:
    from neuraldbg_cli.verify import overlay

    return ["guard", *(["overlay"] if overlay.available() == "" else [])]


@pytest.mark.parametrize("isolation", _isolations())
@pytest.mark.parametrize(("script", "args"), [("saver_timm.py", ()), ("saver_timm.py", ("--link", "0")),
                                              ("saver_hf.py", ())], ids=["timm_link", "timm_copy", "hf_rotation"])
def test_checkpoint_saver_verifies_end_to_end_user_folder_byte_identical(tmp_path, script, args, isolation):
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in (script, "common.py"):
        shutil.copy(ASSETS / name, proj / name)
    run_dir = proj / "runs" / "first"  # inside the user's folder, as by default
    r = run_cli("run", "-q", "--run-dir", run_dir, script, *args, cwd=proj)
    assert r.returncode == 0, r.stderr
    before = {k: v for k, v in _state(proj).items() if not k.startswith("runs")}
    assert any("checkpoint-" in k for k in before), before  # the original run's checkpoints are there

    r = run_cli("verify", run_dir, "--fix", "lr_scale", "--timeout", "120", NEURALDBG_ISOLATION=isolation,
                timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((run_dir / "verify.json").read_text())
    control = doc["control"]["runs"][0]
    assert control["state"] == "ok" and control["isolation"] == isolation, control
    fix = doc["fixes"][0]
    assert fix["id"] == "lr_scale" and fix["status"] == "verified", fix
    assert fix["isolation"] == isolation, fix
    assert f"isolation: {isolation}" in r.stdout, r.stdout
    after = {k: v for k, v in _state(proj).items() if not k.startswith("runs")}
    assert after == before  # byte-identical, same times and modes, nothing added or removed
