"""A zoo of awkward training code that must run unchanged under neuraldbg and still be observed: exit 0,
no traceback or internal error, the models named in model.json, statistics written."""
import json
import re

import pytest
from conftest import run_cli


def _clean(obs):
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert "Traceback" not in obs.proc.stderr and "internal error" not in obs.proc.stderr, obs.proc.stderr


def _models(obs):
    return {m["name"]: m for m in json.loads((obs.run_dir / "model.json").read_text())["models"]}


def _stats(obs):
    return [json.loads(line) for line in (obs.run_dir / "stats.jsonl").read_text().splitlines()]


def test_odd_outputs_shared_modules_and_late_parameters(observe):
    obs = observe("zoo_outputs.py")
    _clean(obs)
    models = _models(obs)
    zoo = models["Zoo"]
    assert {"emb", "cell", "tupler.fc", "nothing", "counter", "block.inner.0", "block.inner.1"} <= set(zoo["order"])
    assert "head" in zoo["modules"]  # tied to emb.weight: named, its parameter counted once
    assert zoo["n_params"] == sum(m["params"] for m in zoo["modules"].values())
    assert models["Sequential"]["modules"]["0"]["in_optimizer"]  # built after the optimizer, added to it
    assert obs.report["steps_observed"] == 20
    assert obs.report["status"] == "healthy", obs.report["hypotheses"]


def test_torch_compile(compiled):
    """torch.compile(model) and model.compile(): same graphs, graph breaks and loss as without neuraldbg,
    the models named as themselves, the wrapper's hooks firing once per call."""
    plain, obs = compiled
    _clean(obs)
    counters = json.loads(obs.proc.stdout)
    assert counters == json.loads(plain.stdout)
    assert counters["graph_breaks"] == 0
    assert "ROOT_CALLS {'OptimizedModule': 15}" in obs.proc.stderr  # 15 steps, one call each
    models = _models(obs)
    assert set(models["Net"]["modules"]) == {"fc1", "act", "fc2"} and set(models["Head"]["modules"]) == {"proj"}
    assert "_orig_mod" not in (obs.run_dir / "stats.jsonl").read_text()
    assert {"Net|fc1", "Head|proj"} <= set(_stats(obs)[0]["grads"])


def test_amp_gradscaler_accumulation_checkpoint_vmap(observe):
    obs = observe("zoo_amp.py")
    _clean(obs)
    out = json.loads(obs.proc.stdout)
    assert out["skipped"] >= 1 and out["per_sample_grad"] == [8, 8, 16]
    assert {"fc1", "fc2", "head"} <= set(_models(obs)["Net"]["modules"])
    assert obs.report["steps_observed"] == 40 - out["skipped"]  # steps the scaler skipped are not steps
    kinds = {h["kind"] for h in obs.report["hypotheses"]}
    assert not kinds & {"non_finite", "exploding_gradient"}, obs.report["hypotheses"]


def test_worker_and_forked_processes(observe):
    obs = observe("zoo_workers.py", quiet=False)
    _clean(obs)
    assert "pool [0, 1, 4, 9]" in obs.proc.stdout and "final loss" in obs.proc.stdout
    assert obs.proc.stderr.count("neuraldbg: trace in") == 1  # the verdict, from the parent only
    steps = [row["step"] for row in _stats(obs)]
    assert steps == sorted(set(steps)) and len(steps) == 16  # 2 epochs x 8 batches, no rows from children
    for line in (obs.run_dir / "events.jsonl").read_bytes().splitlines():
        json.loads(line)
    assert json.loads((obs.run_dir / "meta.json").read_text())["exit_status"] == 0


def test_long_run_keeps_memory_flat_and_the_trace_small(observe):
    """5k steps of a tiny model (for the 100k-step version: neuraldbg run tests/assets/zoo_long.py --steps
    100000). Memory is flat after warm-up; events are written on transitions only."""
    obs = observe("zoo_long.py", "--steps", "5000")
    _clean(obs)
    rss = {int(k): v for k, v in json.loads(obs.proc.stdout)["rss"].items()}
    assert rss[5000] - rss[500] < 16, rss  # MiB
    assert len((obs.run_dir / "events.jsonl").read_bytes().splitlines()) <= 5
    # stats.jsonl: one row per step for now; thinning it for long runs belongs to the performance work
    assert (obs.run_dir / "stats.jsonl").stat().st_size < 400 * 5000


@pytest.mark.parametrize("command", ["events", "report"])
def test_other_commands_on_zoo_traces(observe, command, tmp_path):
    for script in ("zoo_outputs.py", "zoo_amp.py"):
        extra = ["-o", tmp_path / "r.html"] if command == "report" else []
        r = run_cli(command, observe(script).run_dir, *extra)
        assert r.returncode == 0 and not r.stderr, r.stderr
        assert not re.search(r"Traceback|internal error", r.stdout)
