"""Bad input to explain/events/report (beyond test_explain_input.py): each case gives one clear stderr line
and exit 2, or exit 0 with a warning when the rest is usable; never a traceback, never unbounded memory.
The reader is fuzzed with hypothesis. Trace data is only ever parsed as JSON."""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, cli_env, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.reason import reasoner
from neuraldbg_cli.render import RENDERERS, html
from neuraldbg_cli.trace.job import read_run
from neuraldbg_cli.trace.reader import MAX_LINE, read_events

EVENT = {"schema": "neuraldbg.event/1", "type": "gradient_health_transition", "step": 3, "module": "layers.0",
         "root": "Net", "from": "healthy", "to": "vanishing", "metrics": {"rms": 1e-12}, "site": "gradient"}


@pytest.fixture(scope="module")
def good_run(observe):
    return observe("vanishing.py").run_dir


@pytest.fixture
def run_copy(good_run, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(good_run, dst)
    return dst


def _one_line_exit_2(r, *words):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(w in r.stderr for w in words), r.stderr


def _usable(run_dir, *warnings, top="vanishing_gradient"):
    """explain exits 0 with the good run's verdict and the expected warnings."""
    r = run_cli("explain", run_dir, "--format", "json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    for w in warnings:
        assert any(w in x for x in doc["warnings"]), (w, doc["warnings"])
    if top:
        assert doc["hypotheses"][0]["kind"] == top
    return doc


def _events_and_report_work(run_dir):
    for command in ("events", "report"):
        r = run_cli(command, run_dir)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def _append(run_dir, data: bytes):
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(data)


def test_empty_events_file(run_copy, tmp_path):
    (run_copy / "events.jsonl").write_bytes(b"")
    assert _usable(run_copy, top=None)["hypotheses"] == []
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "events.jsonl").write_bytes(b"\n\n")
    doc = _usable(bare, "meta.json is missing", top=None)
    assert doc["status"] == "no_training_observed"


def test_wrong_types_in_event_fields(run_copy):
    for bad in ({"step": "three"}, {"module": ["a"]}, {"from": {}}, {"to": None}, {"metrics": {"rms": "big"}},
                {"metrics": [1, 2]}, {"type": 7}, {"step": 1.5}):
        _append(run_copy, json.dumps({**EVENT, **bad}).encode() + b"\n")
    doc = _usable(run_copy, "is not a valid event")
    _events_and_report_work(run_copy)
    assert len([w for w in doc["warnings"] if "not a valid event" in w]) == 8


def test_huge_numbers(run_copy):
    _append(run_copy, json.dumps({**EVENT, "step": -5}).encode() + b"\n")
    _append(run_copy, json.dumps({**EVENT, "step": 10**30}).encode() + b"\n")
    _append(run_copy, json.dumps({**EVENT, "metrics": {"rms": 1e308, "x": 10**30, "y": -1e308}}).encode() + b"\n")
    _append(run_copy, b'{"schema": "neuraldbg.event/1", "type": "x", "step": 1e999, "module": null, "from": "a", '
                      b'"to": "b", "metrics": {}}\n')
    doc = _usable(run_copy, "out of range", "not a valid event", "not valid JSON")
    json.dumps(doc, allow_nan=False)


def test_nan_and_infinity_literals(run_copy):
    _append(run_copy, b'{"schema": "neuraldbg.event/1", "type": "non_finite", "step": 1, "module": "layers.0", '
                      b'"from": "healthy", "to": "non_finite", "metrics": {"rms": NaN, "x": Infinity, "y": -Infinity}}\n')
    _usable(run_copy, "not valid JSON")


def test_unknown_event_types_are_ignored(run_copy):
    _append(run_copy, json.dumps({**EVENT, "type": "from_the_future", "to": "whatever", "extra": {"a": 1}}).encode()
            + b"\n")
    _usable(run_copy)


def test_future_meta_schema(run_copy):
    meta = json.loads((run_copy / "meta.json").read_text())
    (run_copy / "meta.json").write_text(json.dumps({**meta, "schema": "neuraldbg.meta/99"}))
    for command in ("explain", "events", "report"):
        _one_line_exit_2(run_cli(command, run_copy), "neuraldbg.meta/99", "upgrade")


def test_binary_garbage(run_copy):
    garbage = bytes(range(256)) * 40
    _append(run_copy, garbage + b"\n" + garbage[::-1])
    _usable(run_copy, "not valid JSON")
    _events_and_report_work(run_copy)
    (run_copy / "meta.json").write_bytes(garbage)
    _one_line_exit_2(run_cli("explain", run_copy), "meta.json")


def test_symlink_loops(tmp_path, run_copy):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for command in ("explain", "events", "report"):
        _one_line_exit_2(run_cli(command, loop), "cannot open")
    (run_copy / "events.jsonl").unlink()
    (run_copy / "events.jsonl").symlink_to(run_copy / "events.jsonl")
    _one_line_exit_2(run_cli("explain", run_copy), "events.jsonl")


def test_events_and_report_on_missing_or_file_input(tmp_path):
    (tmp_path / "f").write_text("x")
    for command in ("events", "report"):
        _one_line_exit_2(run_cli(command, tmp_path / "missing"), "does not exist")
        _one_line_exit_2(run_cli(command, tmp_path / "f"), "not a directory")


def _read_in_fresh_process(run_dir) -> dict:
    """Explain run_dir in a fresh process: its report and peak RSS (KiB)."""
    code = ("import json, resource, sys; from neuraldbg_cli.reason import reasoner; from neuraldbg_cli.trace.job import read_run; "
            "doc = reasoner.explain(read_run(sys.argv[1])).to_json_dict(); "
            "doc['rss'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; print(json.dumps(doc))")
    r = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, env=cli_env(),
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_one_gigabyte_line_keeps_memory_bounded(good_run, run_copy):
    """A 1 GiB events line (a sparse file: no disk is filled) and a real line over MAX_LINE are skipped
    without being read into memory."""
    _append(run_copy, b"x" * (MAX_LINE + 10) + b"\n")
    with open(run_copy / "events.jsonl", "ab") as f:
        f.truncate(f.tell() + (1 << 30))  # a hole of 1 GiB of zero bytes, no newline: one huge last line
    doc = _read_in_fresh_process(run_copy)
    assert doc["hypotheses"][0]["kind"] == "vanishing_gradient"
    assert sum(f"over {MAX_LINE} bytes" in w for w in doc["warnings"]) == 2, doc["warnings"]
    assert doc["rss"] - _read_in_fresh_process(good_run)["rss"] < 32 * 1024


def test_trace_data_is_never_evaluated(tmp_path):
    marker = tmp_path / "pwned"
    lines = [f"__import__('os').system('touch {marker}')", "cos\nsystem\n(S'touch x'\ntR.",  # code, a pickle
             json.dumps({**EVENT, "module": f"__import__('os').system('touch {marker}')"})]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    warnings: list[str] = []
    events = read_events(path, warnings)
    assert [e.module for e in events] == [f"__import__('os').system('touch {marker}')"]
    assert not marker.exists() and len(warnings) == 5  # the code line and the 4 lines of the pickle


# ---------------------------------------------------------------- fuzzing the reader (in-process)

PAIRS = [("gradient_health_transition", s) for s in ("healthy", "vanishing", "exploding", "non_finite", "absent")] + \
        [("activation_regime_shift", s) for s in ("normal", "dead", "saturated", "anomalous", "non_finite")] + \
        [("optimizer_instability", s) for s in ("normal", "plateau", "diverging", "oscillating", "non_finite")] + \
        [("data_anomaly", s) for s in ("normal", "non_finite", "extreme_scale", "shifted")] + \
        [("non_finite", "non_finite"), ("parameter_update", "unchanged"), ("parameter_update", "updating"),
         ("run_summary", "finished"), ("unknown", "x")]
KEYS = ["rms", "ratio_to_max", "baseline_rms", "mean", "std", "min", "max", "dead_frac", "sat_frac", "nonfinite", "loss",
        "start", "best", "recent", "weight_norm", "update_norm", "in_optimizer", "baseline_mean", "baseline_std", "steps"]
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) |
                    st.text(max_size=4), lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c,
                                                                                            max_size=3), max_leaves=6)
NUMBER = st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-2**70, 2**70)
EVENTS = st.builds(lambda pair, step, module, root, site, metrics: {
    "schema": "neuraldbg.event/1", "type": pair[0], "from": "healthy", "to": pair[1], "step": step, "module": module,
    "root": root, "site": site, "metrics": metrics},
    st.sampled_from(PAIRS), st.integers(0, 300) | st.integers(-5, 2**70), st.none() | st.sampled_from(["0", "a.b", ""]),
    st.sampled_from([None, "Net", "Net#1"]), st.sampled_from([None, "gradient", "input", "target", "loss", "output"]),
    st.dictionaries(st.sampled_from(KEYS), NUMBER, max_size=6))
META = st.fixed_dictionaries({}, optional={"status": st.sampled_from(["running", "finished"]) | JSON,
                                           "exit_status": st.integers(-300, 300) | JSON,
                                           "steps_observed": st.integers(0, 2**70) | JSON, "settings": JSON}) | JSON
MODEL = st.fixed_dictionaries({"models": st.lists(st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["Net", "Net#1"]) | JSON, "n_modules": NUMBER | JSON, "n_params": NUMBER | JSON,
    "order": st.lists(st.sampled_from(["0", "a.b", 3]), max_size=3) | JSON,
    "modules": st.dictionaries(st.sampled_from(["0", "a.b"]), st.fixed_dictionaries(
        {"type": st.sampled_from(["Linear", "Tanh", "LSTM"]) | JSON}) | JSON, max_size=2) | JSON,
    "facts": st.fixed_dictionaries({}, optional={
        "optimizers": st.lists(st.fixed_dictionaries({}, optional={"type": JSON, "warmup": JSON}) | JSON, max_size=2)
        | JSON, "residual_blocks": st.dictionaries(st.sampled_from(["0", "a.b"]), JSON, max_size=2) | JSON}) | JSON}),
        max_size=2),
    "optimizers": st.lists(st.fixed_dictionaries({}, optional={"type": JSON, "groups": st.lists(
        st.fixed_dictionaries({"lr": NUMBER | JSON}), max_size=2) | JSON}), max_size=2)}) | JSON
FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(events=st.lists(EVENTS | JSON, max_size=12), meta=META, model=MODEL, tail=st.binary(max_size=40))
def test_fuzz_read_run_and_explain(events, meta, model, tail):
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "events.jsonl").write_bytes(b"".join(json.dumps(e).encode() + b"\n" for e in events) + tail)
        (d / "meta.json").write_text(json.dumps(meta))
        (d / "model.json").write_text(json.dumps(model))
        try:
            run = read_run(d)
        except NeuraldbgError as e:
            assert "\n" not in str(e)
            return
        report = reasoner.explain(run)
        for render in RENDERERS.values():
            render(report, reasoner.kinds_checked([]), 0.5)
        html.render_page(report, [])


@FUZZ
@given(data=st.lists(st.binary(max_size=60) | st.sampled_from([b"\n", b"{", b"}", b'"', b"\xff", b"\x00"]),
                     max_size=40))
def test_fuzz_read_events_on_bytes(data):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "events.jsonl"
        path.write_bytes(b"".join(data))
        warnings: list[str] = []
        try:
            read_events(path, warnings)
        except NeuraldbgError:
            pass
        assert len(warnings) <= 21
