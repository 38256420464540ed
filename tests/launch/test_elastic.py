"""torchrun jobs across nodes and restarts, through the real CLI on this machine: two torchrun agents
(--nnodes 2, c10d rendezvous on localhost), each with its own run directory, merged by `explain DIR1 DIR2`; and a
job whose rank fails once and is restarted by --max-restarts, resumed from a checkpoint or from scratch."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ASSETS, cli_env, run_cli

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this torch build has no gloo backend for torch.distributed", allow_module_level=True)

NEURALDBG = [sys.executable, "-m", "neuraldbg_cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def explain(*dirs: Path) -> dict:
    r = run_cli("explain", *dirs, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


_jobs: dict[str, list[Path]] = {}


def two_nodes(tmp: Path, mode: str) -> list[Path]:
    """Two agents of one job, one rank each, started together; each node's run directory (one job per mode)."""
    if mode not in _jobs:
        _jobs[mode] = _two_nodes(tmp, mode)
    return _jobs[mode]


def _two_nodes(tmp: Path, mode: str) -> list[Path]:
    for _attempt in range(3):  # gloo's teardown can abort a rank after the verdict (test_distributed)
        port, procs, cwds = free_port(), [], []
        for node in (0, 1):
            cwd = tmp / f"{mode}-{_attempt}-node{node}"
            cwd.mkdir()
            cmd = [*NEURALDBG, "run", "-q", "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                   "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                   "--rdzv-id", f"job-{mode}", str(ASSETS / "ddp_train.py"), "--mode", mode]
            procs.append(subprocess.Popen(cmd, cwd=cwd, env=cli_env(), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
            cwds.append(cwd)
        outs = [p.communicate(timeout=240) for p in procs]
        if all(p.returncode == 0 for p in procs):
            return [next(p for p in (cwd / "runs").iterdir() if p.name != "latest") for cwd in cwds]
    raise AssertionError([o[1][-2000:] for o in outs])


@pytest.mark.parametrize(("mode", "kind"), [("healthy", None), ("drift", "rank_divergence")])
def test_two_nodes_each_with_its_run_directory_explain_as_one_job(tmp_path, mode, kind):
    node0, node1 = two_nodes(tmp_path, mode)
    assert [p.name for p in node0.glob("events.rank*")] == ["events.rank0.jsonl"]
    assert [p.name for p in node1.glob("events.rank*")] == ["events.rank1.jsonl"]
    alone = explain(node1)
    assert any("rank 0 of this 2-rank job is not in this run directory" in w for w in alone["warnings"])
    merged = explain(node0, node1)
    assert sorted(merged["run"]["ranks"]) == ["0", "1"] and merged["steps_observed"] == 40
    assert not any("not in this run directory" in w for w in merged["warnings"])
    counted = [h for h in merged["hypotheses"] if h["confidence"] >= 0.5]
    if kind is None:
        assert counted == [], [(h["kind"], h["confidence"]) for h in counted]
    else:  # only the merged view can see it: the replicas live on different nodes
        assert counted[0]["kind"] == kind and counted[0]["origin"]["rank"] == 1
        assert not [h for h in explain(node0)["hypotheses"] if h["kind"] == kind]


def test_run_directories_of_different_jobs_are_refused(tmp_path):
    node0, _ = two_nodes(tmp_path, "healthy")
    other = tmp_path / "other"
    other.mkdir()
    for p in node0.iterdir():  # rank 0 of a job of another size
        doc = p.read_text()
        if p.name.startswith("meta"):
            meta = json.loads(doc)
            meta["world_size"] = 4
            doc = json.dumps(meta)
        (other / p.name.replace("rank0", "rank1")).write_text(doc)
    r = run_cli("explain", node0, other)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "different sizes" in r.stderr


# ---------------------------------------------------------------- --max-restarts

def restarted(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = tmp / "trace"
    cmd = [*NEURALDBG, "run", "-q", "--run-dir", str(run_dir), "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "2", "--max-restarts", "1", str(ASSETS / "ddp_restart.py"), *args]
    proc = subprocess.run(cmd, cwd=tmp, env=cli_env(), capture_output=True, text=True, timeout=240)
    return proc, run_dir


def test_a_restarted_rank_continues_its_trace(tmp_path, resume=True, steps=30):
    proc, run_dir = restarted(tmp_path, *(["--resume"] if resume else []))
    assert proc.returncode == 0, proc.stderr[-3000:]  # as without neuraldbg: the restart saves the job
    assert "attempt 1 final loss" in proc.stdout
    report = explain(run_dir)
    assert report["status"] == "healthy" and report["steps_observed"] == steps  # every optimizer step, once
    for rank in (0, 1):
        meta = json.loads((run_dir / f"meta.rank{rank}.json").read_text())
        assert meta["attempt"] == 1 and meta["resumed"] is resume and meta["exit_status"] == 0
        assert [a["steps"] for a in meta["attempts"]] == [12] and meta["attempts"][0]["status"] == "failed"
        restart = [json.loads(x) for x in (run_dir / f"events.rank{rank}.jsonl").read_text().splitlines()
                   if '"restart"' in x]
        assert [(e["step"], e["to"]) for e in restart] == [(12, "restarted")]
    said = [w for w in report["warnings"] if "restarted by torchrun after 12 steps" in w]
    assert len(said) == 2 and all(("resumed from a checkpoint" in w) is resume for w in said)


def test_a_restart_from_scratch_counts_on_and_dates_a_later_problem_on_the_jobs_steps(tmp_path):
    """No checkpoint: the second attempt trains its 30 steps again after the first's 12 (42 in all, said so), and
    a NaN its rank 1 reads at its own step 20 is the job's step 12 + 20."""
    proc, run_dir = restarted(tmp_path, "--nan-at", "20")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = explain(run_dir)
    assert report["steps_observed"] == 42
    assert sum("it trained again from the start" in w for w in report["warnings"]) == 2
    assert all(json.loads((run_dir / f"meta.rank{r}.json").read_text())["resumed"] is False for r in (0, 1))
    top = [h for h in report["hypotheses"] if h["confidence"] >= 0.5][0]
    assert top["kind"] == "data_anomaly" and top["origin"]["step"] == 32 and top["ranks"] == [1]
