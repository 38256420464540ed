"""Long runs stay bounded on disk (stats.jsonl is thinned after its first STATS_EVERY_STEP steps), and the
bulk event reader finds exactly what the line-by-line reader finds, with the same warnings."""
import json
import math

import pytest
from conftest import run_cli

from neuraldbg_cli.trace import reader as tracereader
from neuraldbg_cli.trace import writer as tracewriter
from neuraldbg_cli.trace.events import ActStats, GradStats, SemanticEvent, StepRecord
from neuraldbg_cli.trace.writer import STATS_EVERY_STEP, StatsThinner


def _records(n: int, every: int = 10):
    for step in range(n):
        sampled = step < 10 or step % every == 0
        rec = StepRecord(step=step, sampled=sampled, loss=1.0 + step % 7)
        if sampled:
            rec.acts[("M", "0", "output")] = ActStats(1, 0, 1, -1, 1, 0, 0, 0, 0, 0)
            rec.grads[("M", "0")] = GradStats(norm=0.5, numel=4, weight_norm=2.0)
        yield rec


def test_stats_rows_grow_with_log_of_steps():
    thinner, rows, n = StatsThinner(), [], 300_000
    batch = []
    for rec in _records(n):
        batch.append(rec)
        if len(batch) == 10:
            rows += thinner.rows(batch)
            batch = []
    rows += thinner.rows(batch) + thinner.finish()
    assert [r["step"] for r in rows[:STATS_EVERY_STEP]] == list(range(STATS_EVERY_STEP))
    assert len(rows) <= STATS_EVERY_STEP + 100 * math.log(n / STATS_EVERY_STEP) + 2
    assert rows[-1]["step"] == n - 1  # plots reach the end of the run
    steps = [r["step"] for r in rows]
    assert steps == sorted(set(steps))
    thinned = rows[STATS_EVERY_STEP:-1]
    assert all("grads" in r for r in thinned)  # thinned rows are sampled steps: gradients stay plottable
    assert sum(r["loss_steps"] for r in rows[STATS_EVERY_STEP:]) == n - STATS_EVERY_STEP  # every loss counted once
    # the loss of a thinned row is the mean over its window (losses cycle 1..7)
    prev = rows[STATS_EVERY_STEP - 1]["step"]
    for r in thinned[:20]:
        window = [1.0 + s % 7 for s in range(prev + 1, r["step"] + 1)]
        assert r["loss"] == pytest.approx(sum(window) / len(window))
        prev = r["step"]


def test_long_run_writes_bounded_files(tmp_path):
    script = tmp_path / "long.py"
    script.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.05)\n"
        "x, y = torch.randn(32, 4), torch.randn(32, 1)\n"
        "for _ in range(4000):\n"
        "    opt.zero_grad(); ((m(x) - y) ** 2).mean().backward(); opt.step()\n")
    run_dir = tmp_path / "run"
    r = run_cli("run", "--quiet", "--run-dir", run_dir, script)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (run_dir / "stats.jsonl").read_text().splitlines()]
    assert STATS_EVERY_STEP < len(rows) < STATS_EVERY_STEP + 200
    assert rows[-1]["step"] == 3999
    assert (run_dir / "events.jsonl").stat().st_size < 20_000  # events follow transitions, not steps
    assert run_cli("report", run_dir, "-o", tmp_path / "r.html").returncode == 0
    page = (tmp_path / "r.html").read_text()
    assert "<svg" in page and "data-grid=" in page


EVENT = {"schema": "neuraldbg.event/1", "type": "gradient_health_transition", "module": "layers.0", "root": "Net",
         "from": "healthy", "to": "vanishing", "metrics": {"rms": 1e-9}, "site": "gradient"}


def _mixed_file(path):
    lines = []
    for i in range(60):
        lines.append(json.dumps({**EVENT, "step": i}))
        if i == 7:
            lines.append("{not json")
        if i == 13:
            lines.append("[1, 2]")
        if i == 21:
            lines.append(json.dumps({**EVENT, "step": "soon"}))  # not a valid event
        if i == 30:
            lines.append("")
        if i == 34:
            lines.append(json.dumps({**EVENT, "step": 1 << 63}))  # out of range
        if i == 41:
            lines.append(json.dumps({**EVENT, "step": 41}) + ", " + json.dumps({**EVENT, "step": 41}))  # two values
        if i == 47:
            lines.append('{"type": "x", "step": 1, "from": "a", "to": "b", "metrics": {"rms": NaN}}')
    path.write_text("\n".join(lines) + "\n" + json.dumps({**EVENT, "step": 99})[:-5])  # cut-short last line


@pytest.mark.parametrize("max_line", [512, 4096, 1 << 20])
def test_bulk_reader_matches_line_by_line(tmp_path, monkeypatch, max_line):
    path = tmp_path / "events.jsonl"
    _mixed_file(path)
    monkeypatch.setattr(tracereader, "MAX_LINE", max_line)  # blocks of a few lines: some good ones are decoded whole
    warnings: list[str] = []
    events = tracereader.read_events(path, warnings)
    assert [e.step for e in events] == list(range(60))
    expected = ["line 9 of events.jsonl is not valid JSON", "line 16 of events.jsonl is not a JSON object",
                "line 25 of events.jsonl is not a valid event", "has step 9223372036854775808, out of range",
                "line 48 of events.jsonl is not valid JSON", "line 55 of events.jsonl is not valid JSON",
                "the last line of events.jsonl is cut short"]
    for text in expected:
        assert any(text in w for w in warnings), (text, warnings)
    assert len(warnings) == len(expected), warnings


def test_bulk_reader_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(tracereader, "MAX_EVENTS", 50)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps({**EVENT, "step": i}) + "\n" for i in range(50)))
    warnings: list[str] = []
    assert len(tracereader.read_events(path, warnings)) == 50 and not warnings  # exactly the cap: nothing left out
    with path.open("a") as f:
        f.write(json.dumps({**EVENT, "step": 50}) + "\n")
    warnings = []
    assert len(tracereader.read_events(path, warnings)) == 50 and any("more than 50 events" in w for w in warnings)



@pytest.mark.parametrize("max_line", [4, 16, 40])
def test_line_blocks_match_iter_lines(tmp_path, monkeypatch, max_line):
    """Split a block at a time, lines come out as iter_lines reads them one by one, over-long ones and lines
    across block edges included (a tiny MAX_LINE makes every case happen)."""
    monkeypatch.setattr(tracereader, "MAX_LINE", max_line)
    path = tmp_path / "events.jsonl"
    for data in [b"", b"\n", b"a", b"a\n", b"a\n\nbb\n", b"x" * 100, b"x" * 100 + b"\nab\n" + b"y" * 41 + b"\ncd",
                 b"".join(b"z" * n + b"\n" for n in range(60)), b"".join(b"z" * n + b"\n" for n in range(60)) + b"tail"]:
        path.write_bytes(data)
        expected = [(n, line if line is None else line.rstrip(b"\n"), complete)
                    for n, line, complete in tracereader.iter_lines(path)]
        got = [(first + i, line, complete) for first, body, complete in tracereader.iter_blocks(path)
               for i, line in enumerate(tracereader.split_block(body, complete))]
        assert got == expected, data


def test_odd_lines_read_as_the_event_they_stand_for(tmp_path):
    """Lines neuraldbg does not write but the contract allows (an integer metric, no schema, an extra field, no
    module/root/site) read as the event they stand for, decoded whole in a block or line by line alike; a
    boolean metric or a field under its Python name (`from_`) is no event."""
    event = {**EVENT, "step": 3}
    odd = [{**event, "metrics": {"rms": 1}}, {k: v for k, v in event.items() if k != "schema"}, {**event, "x": 1},
           {k: v for k, v in event.items() if k not in ("module", "root", "site")}]
    want = [{**event, "metrics": {"rms": 1.0}}, event, event, {**event, "module": None, "root": None, "site": None}]
    path = tmp_path / "events.jsonl"
    for lines in ([json.dumps(o) for o in odd], [json.dumps(o) + "\n{bad" for o in odd]):  # whole; line by line
        path.write_text("".join(line + "\n" for line in lines))
        warnings: list[str] = []
        events = tracereader.read_events(path, warnings)
        assert [e.to_json_dict() for e in events] == want
        assert {type(e) for e in events} == {SemanticEvent}
        assert len(warnings) == (0 if lines[0].endswith("}") else len(odd))
    by_name = {k: v for k, v in event.items() if k != "from"}
    rejected = [{**event, "metrics": {"a": True}}, {**by_name, "from_": "healthy"}]
    path.write_text("".join(json.dumps(o) + "\n" for o in rejected))
    warnings = []
    assert tracereader.read_events(path, warnings) == [] and all("is not a valid event" in w for w in warnings)
    assert len(warnings) == 2


def test_events_write_as_they_read(tmp_path):
    """What the writer puts on a line is what the reader gives back (floats of every size, nulls, key order)."""
    metrics = {"a": 1e-09, "b": 1e308, "c": -1e308, "d": None, "e": 123456.0, "f": 0.1, "g": 1e16, "h": 0.0}
    ev = SemanticEvent(type="t", step=5, module="m.0", root="Net", from_="healthy", to="vanishing", metrics=metrics,
                       site="gradient")
    writer = tracewriter.RunWriter(tmp_path)
    writer.event(ev.to_json_dict())
    writer.close()
    line = (tmp_path / "events.jsonl").read_bytes()
    assert list(json.loads(line)) == ["schema", "type", "step", "module", "root", "from", "to", "metrics", "site"]
    assert tracereader.read_events(tmp_path / "events.jsonl", []) == [ev]


def test_unhashable_schema_is_an_unknown_schema(tmp_path):
    from neuraldbg_cli.errors import NeuraldbgError

    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({**EVENT, "step": 1, "schema": [1]}) + "\n")
    with pytest.raises(NeuraldbgError, match="uses event schema"):
        tracereader.read_events(path, [])


@pytest.mark.parametrize("max_line", [256, 1024, 1 << 20])
def test_whole_blocks_read_as_line_by_line(tmp_path, monkeypatch, max_line):
    """Blocks of good lines are decoded in one call (_whole); any block with a line that is blank, holds two
    values or none, or is bad in any way, is read line by line. Events and warnings are the same as reading
    every line on its own, wherever the blocks start (a small MAX_LINE makes many blocks)."""
    import random

    rnd = random.Random(max_line)
    good = lambda i: json.dumps({**EVENT, "step": i}, separators=(",", ":"))  # noqa: E731
    odd = ["", "   ", good(1) + good(2), good(3) + " " + good(4), "{bad", good(5).replace("1e-09", "1"),
           good(6).replace('"to"', '"x":1,"to"'), good(7).replace('"healthy"', '"recovering"'), "\t", "[]"]
    lines = [good(i) if rnd.random() < 0.9 else rnd.choice(odd) for i in range(400)]
    # a blank line and a line of two events side by side: as many values as lines, yet not one per line
    lines[200:203] = [odd[0], odd[2], odd[1] + " " + odd[3]]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(tracereader, "MAX_LINE", max_line)
    whole = tracereader._EventReader._whole
    for _ in range(2):
        got_warnings: list[str] = []
        got = [e.to_json_dict() for e in tracereader.read_events(path, got_warnings)]
        monkeypatch.setattr(tracereader._EventReader, "_whole", lambda self, body: False)
        want_warnings: list[str] = []
        want = [e.to_json_dict() for e in tracereader.read_events(path, want_warnings)]
        assert got == want and got_warnings == want_warnings
        assert len(got) > 300
        lines = [line for line in lines if line not in odd[4:]]  # only what _whole could be fooled by
        path.write_text("\n".join(lines) + "\n")
        monkeypatch.setattr(tracereader._EventReader, "_whole", whole)
