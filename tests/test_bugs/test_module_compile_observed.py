"""Guard for the torch.compile fix: a model compiled in place with model.compile() compiles its own call,
hooks included, so once the hooks do nothing under tracing it was invisible (before, it was seen only
because the hooks were traced into its graph). It is now a root when compiled; its gradients are seen."""
import json


def test_module_compile_is_observed(compiled):
    _, obs = compiled
    models = {m["name"]: m for m in json.loads((obs.run_dir / "model.json").read_text())["models"]}
    assert set(models["Head"]["modules"]) == {"proj"}
    rows = [json.loads(line) for line in (obs.run_dir / "stats.jsonl").read_text().splitlines()]
    assert all(row["grads"]["Head|proj"][0] > 0 for row in rows if "grads" in row)
