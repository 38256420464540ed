"""Bug: RunWriter ignored the count returned by an unbuffered write, so a short write (nearly full disk,
a signal) left half a line that the next event was glued to. Lines are now written completely or fail."""
import json

from neuraldbg_cli.trace.writer import RunWriter


class ShortFile:
    """Accepts at most 7 bytes per write, like a raw file under pressure."""

    def __init__(self):
        self.data = b""

    def write(self, b):
        chunk = bytes(b[:7])
        self.data += chunk
        return len(chunk)

    def close(self):
        pass


def test_short_writes_still_give_whole_lines(tmp_path):
    writer = RunWriter(tmp_path)
    writer.close()
    writer._events, writer._stats = ShortFile(), ShortFile()
    writer.event({"type": "a", "step": 1, "metrics": {"x": 1.5}})
    writer.event({"type": "b", "step": 2})
    writer.stats([{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}])
    assert [json.loads(line)["type"] for line in writer._events.data.splitlines()] == ["a", "b"]
    assert [json.loads(line)["step"] for line in writer._stats.data.splitlines()] == [1, 2]
