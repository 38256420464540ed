"""Bug: a FIFO (or a symlink to /dev/zero) in place of meta.json, model.json or stats.jsonl made explain
or report hang forever or read without end. Only regular files are read now; anything else is one line,
exit 2."""
import os
import shutil

import pytest
from conftest import run_cli


@pytest.mark.parametrize("name", ["meta.json", "model.json", "stats.jsonl"])
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_special_file_is_refused_quickly(observe, tmp_path, name, kind):
    run_dir = tmp_path / "r"
    shutil.copytree(observe("vanishing.py").run_dir, run_dir)
    (run_dir / name).unlink()
    if kind == "fifo":
        os.mkfifo(run_dir / name)
    else:
        (run_dir / name).symlink_to("/dev/zero")
    command = "report" if name == "stats.jsonl" else "explain"
    r = run_cli(command, run_dir, timeout=30)
    assert "Traceback" not in r.stderr
    if name == "model.json":  # only model.json is optional enough to go on without
        assert r.returncode == 0 and "not a regular file" in r.stdout, r.stderr
    elif name == "stats.jsonl":  # plots are left out
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode == 2 and "not a regular file" in r.stderr and len(r.stderr.splitlines()) == 1
