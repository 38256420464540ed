"""Bug: a child the script forked with os.fork() that left through sys.exit() unwound into neuraldbg and
printed a second verdict ("no training observed") and re-ran the end of the session. Now it just exits."""


def test_forked_child_prints_nothing_of_ours(observe):
    obs = observe("zoo_workers.py", quiet=False)
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert obs.proc.stderr.count("neuraldbg: trace in") == 1, obs.proc.stderr
    assert "no training observed" not in obs.proc.stderr
