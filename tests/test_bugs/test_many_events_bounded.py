"""Bug: events.jsonl was read whole into memory, one pydantic object per line: a huge (corrupt or hostile)
file of valid events grew memory without bound. Reading stops at MAX_EVENTS, with a warning."""
import json

from neuraldbg_cli.trace import reader as tracereader


def test_event_count_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(tracereader, "MAX_EVENTS", 50)
    line = json.dumps({"type": "x", "step": 1, "module": None, "from": "a", "to": "b", "metrics": {}}) + "\n"
    (tmp_path / "events.jsonl").write_text(line * 500)
    warnings: list[str] = []
    events = tracereader.read_events(tmp_path / "events.jsonl", warnings)
    assert len(events) == 50 and any("more than 50 events" in w for w in warnings)
