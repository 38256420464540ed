"""Bug: neuraldbg's global hooks were traced into torch.compile'd graphs (2 graph breaks, 9 graphs instead
of 2, a recompile every step, internal errors). Now the hooks do nothing while dynamo traces. The attention
wrapper read the sampled-step flag before asking whether dynamo traces: a recompile when the flag flipped."""
import json


def test_compiled_graphs_are_the_same_as_without_neuraldbg(compiled):
    plain, obs = compiled
    assert obs.proc.returncode == 0, obs.proc.stderr
    assert json.loads(obs.proc.stdout) == json.loads(plain.stdout)
    assert json.loads(obs.proc.stdout)["graph_breaks"] == 0
    assert "internal error" not in obs.proc.stderr
