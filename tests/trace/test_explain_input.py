"""Bad input to explain/events: one clear stderr line and exit 2, or a usable result with a warning."""
import json

import pytest
from conftest import run_cli


@pytest.fixture(scope="module")
def good_run(observe):
    return observe("vanishing.py").run_dir


def _one_line_exit_2(r):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_missing_dir(tmp_path):
    _one_line_exit_2(run_cli("explain", tmp_path / "missing"))
    _one_line_exit_2(run_cli("events", tmp_path / "missing"))


def test_file_instead_of_dir(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("hi")
    _one_line_exit_2(run_cli("explain", f))


def test_empty_dir(tmp_path):
    _one_line_exit_2(run_cli("explain", tmp_path))


def _copy(good_run, tmp_path):
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(good_run, dst)
    return dst


def test_truncated_last_line_is_accepted(good_run, tmp_path):
    d = _copy(good_run, tmp_path)
    data = (d / "events.jsonl").read_bytes()
    (d / "events.jsonl").write_bytes(data[:-15])
    r = run_cli("explain", d, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["hypotheses"][0]["kind"] == "vanishing_gradient"
    assert any("cut short" in w for w in doc["warnings"])


def test_corrupt_middle_line_is_skipped_and_said(good_run, tmp_path):
    d = _copy(good_run, tmp_path)
    lines = (d / "events.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(2, b"{not json at all\n")
    (d / "events.jsonl").write_bytes(b"".join(lines))
    r = run_cli("explain", d, "--format", "json")
    assert r.returncode == 0
    assert any("line 3" in w for w in json.loads(r.stdout)["warnings"])


def test_unknown_schema_version(good_run, tmp_path):
    d = _copy(good_run, tmp_path)
    with open(d / "events.jsonl", "ab") as f:
        f.write(b'{"schema": "neuraldbg.event/99", "type": "x", "step": 1, "module": null, "from": "a", "to": "b", "metrics": {}}\n')
    _one_line_exit_2(run_cli("explain", d))


def test_corrupt_meta(good_run, tmp_path):
    d = _copy(good_run, tmp_path)
    (d / "meta.json").write_text("{oops")
    _one_line_exit_2(run_cli("explain", d))


def test_unknown_format(good_run):
    _one_line_exit_2(run_cli("explain", good_run, "--format", "pdf"))


def test_explain_is_a_pure_function_of_the_run_dir(good_run):
    a = run_cli("explain", good_run, "--format", "json").stdout
    b = run_cli("explain", good_run, "--format", "json").stdout
    assert a == b


def test_other_formats(good_run):
    junit = run_cli("explain", good_run, "--format", "junit")
    assert junit.returncode == 0 and "<testsuite" in junit.stdout and "vanishing_gradient" in junit.stdout
    gh = run_cli("explain", good_run, "--format", "github")
    assert gh.stdout.startswith("::error")
    text = run_cli("explain", good_run)
    assert "vanishing_gradient" in text.stdout and "try:" in text.stdout


def test_events_filters(good_run):
    r = run_cli("events", good_run, "--type", "gradient_health_transition", "--module", "layers.0", "--json")
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert rows and all(e["module"] == "layers.0" and e["type"] == "gradient_health_transition" for e in rows)
    for e in rows:
        assert {"type", "step", "module", "from", "to", "metrics", "schema", "root"} <= set(e)


def test_report_html(good_run, tmp_path):
    out = tmp_path / "r.html"
    r = run_cli("report", good_run, "-o", out)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "<svg" in html and "vanishing_gradient" in html
