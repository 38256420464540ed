"""Child processes of the observed script that train, through the real CLI: PyTorch's DDP tutorial layout
(torch.multiprocessing.spawn, init_process_group in each child), pytorch/examples' Hogwild (mp.Process on a
shared model, spawn and fork), a Pool of trainers, and DataLoader workers that must cost nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ASSETS, run_cli, run_python

torch = pytest.importorskip("torch")


def observed(tmp_path: Path, script: str, *args: str, options: tuple[str, ...] = ()) -> tuple[object, Path, dict]:
    run_dir = tmp_path / "trace"
    proc = run_cli("run", "-q", "--run-dir", run_dir, *options, ASSETS / script, *args, timeout=240)
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    report = run_cli("explain", run_dir, "--format", "json")
    assert report.returncode == 0, report.stderr
    return proc, run_dir, json.loads(report.stdout)


def counted(report: dict) -> list[dict]:
    return [h for h in report["hypotheses"] if h["confidence"] >= 0.5]


def child_metas(run_dir: Path) -> dict[int, dict]:
    return {int(p.name.split(".rank")[1].split(".")[0]): json.loads(p.read_text()) for p in run_dir.glob("meta.rank*.json")}


# ---------------------------------------------------------------- mp.spawn DDP (the tutorial layout)

@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="no gloo backend")
def test_spawned_ddp_children_are_the_ranks_of_one_verdict(tmp_path):
    proc, run_dir, report = observed(tmp_path, "spawn_ddp.py")
    assert "rank 0 final loss" in proc.stdout
    assert "no training observed" not in proc.stderr and "neuraldbg: healthy (40 steps observed)" in proc.stderr
    metas = child_metas(run_dir)
    assert sorted(metas) == [0, 1]  # named by their process group rank
    for rank, meta in metas.items():
        assert meta["rank"] == rank and meta["world_size"] == 2 and meta["status"] == "finished"
        assert meta["child"]["group"] is True and meta["steps_observed"] == 40
    parent = json.loads((run_dir / "meta.json").read_text())
    assert parent["children"] == 2 and parent["world_size"] == 2 and parent["job"] == metas[0]["job"]
    assert report["status"] == "healthy" and counted(report) == [] and report["steps_observed"] == 40
    plain = run_python(ASSETS / "spawn_ddp.py")
    assert plain.stdout == proc.stdout  # the same training: the same final loss, to the digit


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="no gloo backend")
@pytest.mark.parametrize(("mode", "kind", "ranks"), [("nan_shard", "data_anomaly", [1]),
                                                      ("no_step", "unchanged_weights", [1])])
def test_spawned_ddp_bugs_are_named_with_their_rank(tmp_path, mode, kind, ranks):
    _, _, report = observed(tmp_path, "spawn_ddp.py", "--mode", mode)
    top = counted(report)[0]
    assert top["kind"] == kind, [(h["kind"], h["confidence"]) for h in report["hypotheses"]]
    if ranks is not None:
        assert top["ranks"] == ranks and top["origin"]["rank"] == ranks[0]
    assert report["steps_observed"] == 40
    if mode == "no_step":  # the replicas part because rank 1 never steps: a consequence, not weights edited
        parted = next(h for h in report["hypotheses"] if h["kind"] == "rank_divergence")
        assert parted["caused_by"] == "unchanged_weights" and "Something changed" not in parted["summary"]


# ---------------------------------------------------------------- Hogwild: mp.Process on a shared model

@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_hogwild_children_count_their_steps_and_stay_quiet_when_healthy(tmp_path, start):
    proc, run_dir, report = observed(tmp_path, "hogwild.py", "--start", start)
    assert "test loss" in proc.stdout
    assert report["status"] == "healthy" and counted(report) == []
    metas = child_metas(run_dir)
    assert sorted(metas) == [0, 1] and all(m["steps_observed"] == 30 for m in metas.values())
    assert all(m["child"]["group"] is False and m["child"]["forked"] is (start == "fork") for m in metas.values())
    assert report["steps_observed"] == 60 and report["run"]["processes"] == 2  # per process and in total
    assert "neuraldbg: healthy (60 steps observed in 2 processes)" in proc.stderr


@pytest.mark.parametrize("start", ["fork"])  # (spawn: the same merge; fork is where child 0 saw it at a lower step)
def test_hogwild_nan_in_one_child_starts_at_that_childs_input(tmp_path, start):
    """The shared weights carry child 1's NaN to child 0, whose own step count is not comparable: the
    processes' steps are placed on one clock, so the cause is the first in time."""
    _, _, report = observed(tmp_path, "hogwild.py", "--start", start, "--mode", "nan_child")
    hyps = counted(report)
    assert [h["kind"] for h in hyps[:2]] == ["data_anomaly", "non_finite"], [(h["kind"], h["origin"]) for h in hyps]
    assert hyps[0]["origin"] == {"module": None, "step": 12, "root": "Net", "rank": 1}
    assert hyps[1]["caused_by"] == "data_anomaly"
    assert "Seen on process 1 only." in hyps[0]["summary"]


# ---------------------------------------------------------------- a Pool of trainers

@pytest.mark.parametrize("start", ["fork", "spawn", "forkserver"])
def test_pool_of_trainers(tmp_path, start):
    proc, run_dir, report = observed(tmp_path, "pool_train.py", "--start", start)
    assert report["status"] == "healthy" and counted(report) == []
    assert report["steps_observed"] == 60  # two tasks of 30 steps, whichever worker took them
    # the workers end when their tasks are done, or by Pool.terminate: either way a closed trace
    assert all(m["status"] in ("finished", "terminated") for m in child_metas(run_dir).values()), [(m["status"], m.get("exit_status"), m.get("end")) for m in child_metas(run_dir).values()]
    assert report["warnings"] == []
    if start != "fork":  # (the broken twin, and the same output as under python, once)
        return
    assert proc.stdout == run_python(ASSETS / "pool_train.py", "--start", start).stdout
    bad_proc, _, bad = observed(tmp_path / "bad", "pool_train.py", "--start", start, "--mode", "explode",
                                options=("--fail-on", "exploding_gradient"))
    assert bad_proc.returncode == 3  # --fail-on judges the merged verdict
    assert counted(bad)[0]["kind"] == "exploding_gradient" and bad["steps_observed"] == 60


# ---------------------------------------------------------------- children that do not train

@pytest.mark.parametrize("start,workers", [("fork", "2"), ("spawn", "1")])  # (a spawned worker imports torch)
def test_dataloader_workers_leave_no_trace(tmp_path, start, workers):
    args = ("--start", start, "--epochs", "1", "--workers", workers)
    proc, run_dir, report = observed(tmp_path, "loader_workers.py", *args)
    assert not list(run_dir.glob("*.rank*")), sorted(p.name for p in run_dir.iterdir())
    assert report["steps_observed"] == 32 and "processes" not in report["run"]
    assert proc.stdout == run_python(ASSETS / "loader_workers.py", *args).stdout


def test_a_failing_child_fails_the_parent_as_under_python(tmp_path):
    """mp.spawn re-raises a child's exception in the parent (ProcessRaisedException): the same exit status and
    the same last line of the traceback; the trace the child wrote before is kept."""
    script = tmp_path / "child_raises.py"
    script.write_text(
        "import torch, torch.multiprocessing as mp\n"
        "def train(i):\n"
        "    model = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for step in range(5):\n"
        "        opt.zero_grad(); model(torch.ones(8, 4)).pow(2).mean().backward(); opt.step()\n"
        "    if i == 1:\n"
        "        raise ValueError('child 1 gave up')\n"
        "if __name__ == '__main__':\n"
        "    mp.spawn(train, nprocs=2)\n"
    )
    plain = run_python(script)
    run_dir = tmp_path / "trace"
    proc = run_cli("run", "-q", "--run-dir", run_dir, script)
    assert proc.returncode == plain.returncode != 0
    assert "ValueError: child 1 gave up" in proc.stderr
    assert proc.stderr.split("neuraldbg:")[0].strip().splitlines()[-1] == plain.stderr.strip().splitlines()[-1]
    metas = child_metas(run_dir)
    assert sorted(metas) == [0, 1] and metas[1]["exit_status"] == 1 and metas[0]["exit_status"] == 0
    assert all(m["steps_observed"] == 5 for m in metas.values())


def test_process_pool_executor_and_a_child_leaving_by_os_exit(tmp_path):
    """concurrent.futures' workers are observed like a Pool's; a child that leaves through os._exit (no
    cleanup at all) keeps every line it wrote, and the parent does not wait for it."""
    script = tmp_path / "executor.py"
    script.write_text(
        "import os, sys\n"
        "import torch.multiprocessing as mp\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        f"sys.path.insert(0, {str(ASSETS)!r})\n"
        "from pool_train import train_one\n"
        "def train_and_vanish(cfg):\n"
        "    train_one(cfg)\n"
        "    os._exit(0)\n"
        "if __name__ == '__main__':\n"
        "    with ProcessPoolExecutor(2) as ex:\n"
        "        print(list(ex.map(train_one, [(0.01, 20), (0.02, 20)])))\n"
        "    p = mp.Process(target=train_and_vanish, args=((0.02, 10),))\n"
        "    p.start(); p.join(); print('exit', p.exitcode)\n"
    )
    proc, run_dir, report = observed(tmp_path, str(script))
    assert proc.stdout.splitlines()[-1] == "exit 0"
    metas = child_metas(run_dir)
    assert sorted(m["steps_observed"] for m in metas.values() if m["status"] != "running") == [20, 20]
    vanished = [m for m in metas.values() if m["status"] == "running"]  # os._exit: no end written
    assert len(vanished) == 1 and vanished[0]["child"]["target"].endswith("train_and_vanish")
    assert report["steps_observed"] == 50 and report["status"] == "healthy"


@pytest.mark.parametrize(("start", "named"), [("fork", True), ("spawn", False)])
def test_hogwild_without_share_memory(tmp_path, start, named):
    """Without model.share_memory(), fork hands each child a private copy: their steps never reach the parent's
    model (its test loss stays untrained). Spawn's hand-over shares the parameters anyway: nothing to name."""
    _, run_dir, report = observed(tmp_path, "hogwild.py", "--start", start, "--mode", "unshared")
    hyps = counted(report)
    if named:
        assert hyps and hyps[0]["kind"] == "loop_misuse" and hyps[0]["ranks"] == [0, 1], hyps
        assert "share_memory()" in hyps[0]["suggestions"][0] and "private copy" in hyps[0]["summary"]
        assert all(m["child"]["unshared_models"] == ["Net"] for m in child_metas(run_dir).values())
    else:
        assert hyps == [] and all("unshared_models" not in m["child"] for m in child_metas(run_dir).values())
