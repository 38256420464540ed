"""Bug: under neuraldbg every call of a torch.compile(model) printed PyTorch's UserWarning that global
hooks fire an extra time (and a script running with warnings as errors would fail). neuraldbg handles
the wrapper itself, so its own hooks no longer count for that warning."""


def test_no_global_hook_warning(compiled):
    _, obs = compiled  # run with PYTHONWARNINGS=default
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert "global hooks" not in obs.proc.stderr, obs.proc.stderr
