"""scripts/bench_gpu.py (the one-command GPU overhead benchmark) works before a GPU is lent: its CPU smoke mode
at the smallest settings (two short processes, ~15 s) and its summary on made-up runs (no process)."""
from __future__ import annotations

import importlib.util
import json

from conftest import ROOT, run_python

SCRIPT = ROOT / "scripts" / "bench_gpu.py"


def load_bench_gpu():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cpu_smoke_run_writes_the_table_and_the_json(tmp_path):
    out = tmp_path / "out" / "gpu.json"
    r = run_python(SCRIPT, "--device", "cpu", "--quick", "--no-compile", "--modes", "plain,neuraldbg",
                   "--rounds", "1", "--steps", "10", "--warmup", "1", "--budget-s", "60", "--json", out, timeout=90)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "round 0 plain/eager" in r.stdout and "round 0 neuraldbg/eager" in r.stdout  # progress, as it ran
    assert "| config | compile | rounds | ms/step (median) | ratio vs plain |" in r.stdout
    assert "--no-compile" in r.stdout  # the variants not run are said so
    doc = json.loads(out.read_text())
    assert doc["final"] and doc["configs"] == ["plain/eager", "neuraldbg/eager"]
    assert doc["machine"]["device"] == "cpu" and doc["args"]["gpt_size"] == "small"
    assert [run["ok"] for run in doc["runs"]] == [True, True], doc["runs"]
    rows = {row["config"]: row for row in doc["summary"]}
    ndbg = rows["neuraldbg/eager"]
    assert ndbg["runs"] == 1 and len(ndbg["ratios"]) == 1 and ndbg["ratios"][0] > 0
    assert ndbg["params_same"] == [True]  # neuraldbg did not change training
    assert ndbg["cuda_peak_mib"] is None  # no GPU
    assert out.with_suffix(".md").read_text().strip() == doc["table_md"].strip()
    assert doc["table_md"] in r.stdout


def test_summary_pairs_each_run_with_the_plain_run_of_its_round_and_variant():
    bg = load_bench_gpu()

    def run(rnd, mode, variant, ms, sha="a", ok=True):
        res = {"step_ms": ms, "cpu_ms": ms, "rss_mib": 100.0, "wall_s": 1.0, "params_sha": sha, "cuda_peak_mib": 10.0,
               "graphs": 1, "graph_breaks": 0, "cudagraph_skips": 0}
        return {"round": rnd, "mode": mode, "variant": variant, "ok": ok,
                **({"result": res} if ok else {"error": "failed (1): boom"})}

    runs = [run(0, "plain", "eager", 10), run(0, "neuraldbg", "eager", 12), run(0, "plain", "compile", 5),
            run(0, "neuraldbg", "compile", 6, sha="b"), run(1, "neuraldbg", "eager", 15),
            run(1, "plain", "eager", 10), run(0, "naive", "compile", 0, ok=False)]
    pairs = [("plain", "eager"), ("neuraldbg", "eager"), ("plain", "compile"), ("neuraldbg", "compile"),
             ("naive", "compile"), ("every1", "cudagraphs")]
    rows = {r["config"]: r for r in bg.summarize(runs, pairs)}
    assert rows["neuraldbg/eager"]["ratios"] == [1.2, 1.5] and rows["neuraldbg/eager"]["step_ms"] == 13.5
    assert rows["neuraldbg/compile"]["ratios"] == [1.2]  # against the compiled plain run, not the eager one
    assert rows["neuraldbg/compile"]["params_same"] == [False]
    assert rows["plain/eager"]["plain_repeats"] is True
    md = bg.table(list(rows.values()), ["a note"])
    lines = md.splitlines()
    assert lines[0].startswith("| config |") and len(lines) == 2 + len(pairs) + 2
    assert "| neuraldbg | eager | 2 | 13.50 | 1.350× (1.20–1.50) |" in md
    assert "NO (1/1 differ)" in md and "FAILED: failed (1): boom" in md
    assert "| neuraldbg --every 1 | cudagraphs | 0 | not run |" in md
    assert md.endswith("- a note")


def test_cuda_only_variants_are_skipped_on_cpu_with_a_note():
    bg = load_bench_gpu()
    notes: list[str] = []
    pairs = bg.configs(bg.parse_args(["--device", "cpu"]), notes)
    assert {v for _, v in pairs} == {"eager", "compile"} and len(pairs) == 12
    assert pairs[:3] == [("plain", "eager"), ("neuraldbg", "eager"), ("every1", "eager")]  # neuraldbg's rows first
    assert any("CUDA-only" in n for n in notes)
