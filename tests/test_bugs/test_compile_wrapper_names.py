"""Bug: torch.compile(model) was recorded as a root model named "OptimizedModule" with modules
"_orig_mod.fc1"..., and its hooks fired twice per call. Now it is named after the model inside."""
import json


def test_compiled_model_is_named_as_itself(compiled):
    _, obs = compiled
    models = {m["name"]: m for m in json.loads((obs.run_dir / "model.json").read_text())["models"]}
    assert "OptimizedModule" not in models and set(models["Net"]["modules"]) == {"fc1", "act", "fc2"}
    for name in ("model.json", "events.jsonl", "stats.jsonl"):
        assert "_orig_mod" not in (obs.run_dir / name).read_text()
    assert "ROOT_CALLS {'OptimizedModule': 15}" in obs.proc.stderr  # once per call, 15 steps
