"""Trials that always run, in isolation: unmodified checkpoint savers (timm's hard links, copies and os.replace;
Hugging Face Trainer's save_total_limit rotation of checkpoint folders) verify end to end through the CLI, under
each isolation this machine offers, and the user's folder is byte-identical afterwards, nothing added to it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import ASSETS, cli_env, isolations, run_cli


def _state(folder: Path) -> dict[str, tuple]:
    """Every file's content, mtime and mode, and every folder, under `folder`."""
    out: dict[str, tuple] = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[str(p.relative_to(folder))] = (digest, st.st_mtime_ns, st.st_mode, st.st_nlink)
    return out


SAVERS = {"timm_link": ("saver_timm.py", ()), "timm_copy": ("saver_timm.py", ("--link", "0")),
          "hf_rotation": ("saver_hf.py", ())}
# The guard patches each way of writing: every saver under it. The overlay is one copy-on-write view for any
# write; a copy and a hard link are the same to it (timm_copy: the guard's only).
CASES = [(name, iso) for iso in isolations() for name in SAVERS if iso == "guard" or name != "timm_copy"]


@pytest.mark.parametrize(("saver", "isolation"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_checkpoint_saver_verifies_end_to_end_user_folder_byte_identical(tmp_path, saver, isolation):
    script, args = SAVERS[saver]
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in (script, "common.py"):
        shutil.copy(ASSETS / name, proj / name)
    run_dir = proj / "runs" / "first"  # inside the user's folder, as by default
    r = run_cli("run", "-q", "--run-dir", run_dir, script, *args, cwd=proj)
    assert r.returncode == 0, r.stderr
    before = {k: v for k, v in _state(proj).items() if not k.startswith("runs")}
    assert any("checkpoint-" in k for k in before), before  # the original run's checkpoints are there

    scratch = tmp_path / "tmp"  # verify's temporary directory: the overlay's scratch folders go there
    scratch.mkdir()
    env = {"NEURALDBG_ISOLATION": isolation, "TMPDIR": str(scratch)}
    r = run_cli("verify", run_dir, "--fix", "lr_scale:factor=0.025", "--timeout", "120", timeout=300, **env)
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
    assert not list(scratch.glob("neuraldbg-*"))  # the scratch folders are gone (torch may leave its own)


def test_a_control_that_crashes_where_the_run_did_not_is_reported_as_a_bug_of_verify(tmp_path):
    """The control fails (the disk 'fills up' on re-run): verify says it is its own bug, with the script's last
    line, in the text, on stderr and in verify.json, and every fix is inconclusive for that reason."""
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("saver_timm.py", "common.py"):
        shutil.copy(ASSETS / name, proj / name)
    run_dir = tmp_path / "run"
    assert run_cli("run", "-q", "--run-dir", run_dir, "saver_timm.py", cwd=proj).returncode == 0
    r = run_cli("verify", run_dir, "--fix", "lr_scale:factor=0.025", SAVER_FULL="1", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((run_dir / "verify.json").read_text())
    why = "OSError: [Errno 28] No space left on device: 'output/train'"
    bug = doc["control"]["verify_bug"]
    assert (
        bug.startswith("the control crashed where the original run finished: a bug of neuraldbg verify") and why in bug
    )
    assert f"neuraldbg: {bug}" in r.stderr.splitlines(), r.stderr
    assert "control: crashed: exit status 1: " + why in r.stdout, r.stdout
    fix = doc["fixes"][0]
    assert fix["status"] == "inconclusive" and "a problem of verify itself" in fix["reason"] and why in fix["reason"]


def test_the_overlay_launcher_falls_back_to_the_guard_and_says_why(tmp_path):
    """A folder an overlay cannot cover (a comma cannot travel in its mount options): the command still runs, told
    why, and verify's trial then runs under the write guard alone."""
    import subprocess
    import sys

    root, upper = tmp_path / "a,b", tmp_path / "upper"
    (root / "keep").mkdir(parents=True)
    upper.mkdir()
    show = "import os; print(os.environ.get('NEURALDBG_OVERLAY'), '|', os.environ.get('NEURALDBG_OVERLAY_FAILED'))"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuraldbg_cli.verify.overlay",
            str(root),
            str(upper),
            str(root / "keep"),
            "--",
            sys.executable,
            "-c",
            show,
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env=cli_env(),
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"None | {root} has a character overlay options cannot carry", r.stdout
