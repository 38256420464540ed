"""neuraldbg inside Python (issue 34): `neuraldbg.observe()` (block and decorator), the `%%neuraldbg` cell magic, a
real notebook executed headless, and the Lightning and Hugging Face callbacks, each against `neuraldbg run` on one
asset (tests/assets/api_train.py): the same verdict, the same trace events."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ASSETS, ROOT, cli_env, run_cli

pytest.importorskip("torch")


def python(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    prelude = f"import sys; sys.path[:0] = [{str(ASSETS)!r}, {str(ROOT)!r}]\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)


def events(run_dir: Path) -> list[tuple]:
    rows = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines() if x.strip()]
    return [(e["type"], e["step"], e["module"], e["from"], e["to"], e.get("site")) for e in rows
            if e["type"] != "run_summary"]


def verdict(run_dir: Path) -> list[tuple[str, int | None]]:
    r = run_cli("explain", run_dir, "--format", "json")
    assert r.returncode == 0, r.stderr
    return [(h["kind"], h["origin"]["step"]) for h in json.loads(r.stdout)["hypotheses"] if h["confidence"] >= 0.5]


_runs: dict[str, Path] = {}


def by_run(mode: str, tmp_path_factory) -> Path:
    if mode not in _runs:
        run_dir = tmp_path_factory.mktemp("run") / mode
        proc = run_cli("run", "-q", "--run-dir", run_dir, ASSETS / "api_train.py", "--mode", mode)
        assert proc.returncode == 0, proc.stderr
        _runs[mode] = run_dir
    return _runs[mode]


@pytest.mark.parametrize("mode", ["exploding"])  # (vanishing: the five-way test; every mode's verdict: the next)
def test_observe_gives_what_run_gives(tmp_path, tmp_path_factory, mode):
    r = python(f"""
        import neuraldbg, api_train
        with neuraldbg.observe(run_dir="obs", quiet=True) as obs:
            loss = api_train.train({mode!r})
        print("LOSS", loss, obs.exit_code, obs.explain().steps_observed)
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    plain = subprocess.run([sys.executable, ASSETS / "api_train.py", "--mode", mode], capture_output=True, text=True,
                           env=cli_env())
    loss = r.stdout.split("LOSS ")[1].split()
    assert f"final loss {float(loss[0]):.4f}" in plain.stdout  # the training itself is unchanged
    assert loss[1:] == ["0", "40"]
    run_dir = by_run(mode, tmp_path_factory)
    assert events(tmp_path / "obs") == events(run_dir)
    assert verdict(tmp_path / "obs") == verdict(run_dir)
    meta = json.loads((tmp_path / "obs" / "meta.json").read_text())
    assert meta["mode"] == "api" and meta["status"] == "finished" and meta["steps_observed"] == 40


def test_three_trainings_in_one_process_each_its_own_run_and_models_freed(tmp_path):
    r = python("""
        import gc, weakref, torch, neuraldbg, api_train
        from torch.nn.modules import module
        seen = []
        for mode in ("healthy", "vanishing", "exploding"):
            model, opt, loss_fn = api_train.make(mode)
            with neuraldbg.observe(quiet=True) as obs:
                for xb, yb in api_train.batches(mode):
                    opt.zero_grad(); loss_fn(model(xb), yb).backward(); opt.step()
            ref = weakref.ref(model)
            del model, opt
            gc.collect()
            hooks = len(module._global_forward_hooks) + len(module._global_forward_pre_hooks)
            top = [h.kind.value for h in obs.explain().hypotheses if h.confidence >= 0.5][:1]
            seen.append((mode, str(obs.run_dir), top, ref() is None, hooks, obs.explain().steps_observed))
        print("SEEN", seen)
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    seen = eval(r.stdout.split("SEEN ")[1])  # noqa: S307 - our own printed list
    assert [s[2] for s in seen] == [[], ["vanishing_gradient"], ["exploding_gradient"]]
    assert len({s[1] for s in seen}) == 3  # each block its own run directory (runs/<time>-<name>[-k])
    assert all(s[3] for s in seen), "a model is still referenced after its block"
    assert all(s[4] == 0 for s in seen) and all(s[5] == 40 for s in seen)
    assert r.stderr.count("neuraldbg: trace in runs/") == 3


def test_decorator_nesting_interrupt_and_stop_on(tmp_path):
    r = python("""
        import neuraldbg, api_train
        from neuraldbg_cli.errors import NeuraldbgError

        @neuraldbg.observe(quiet=True)
        def fit(mode):
            return api_train.train(mode)
        fit("vanishing"); fit("healthy")
        with neuraldbg.observe(run_dir="outer", quiet=True):
            try:
                with neuraldbg.observe(run_dir="inner"):
                    pass
            except NeuraldbgError as e:
                print("NESTED", e)
        obs = neuraldbg.observe(run_dir="interrupted", quiet=True)
        try:
            with obs:
                model, opt, loss_fn = api_train.make("healthy")
                for i, (xb, yb) in enumerate(api_train.batches("healthy")):
                    opt.zero_grad(); loss_fn(model(xb), yb).backward(); opt.step()
                    if i == 9:
                        raise KeyboardInterrupt
        except KeyboardInterrupt:
            print("INTERRUPT", obs.exit_code)
        with neuraldbg.observe(run_dir="stopped", stop_on="exploding_gradient", quiet=True) as obs:
            api_train.train("exploding")
        print("STOPPED", obs.stopped["step"], obs.exit_code)
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir() if p.name != "latest")
    assert len(runs) == 2 and all(n.endswith("-fit") or "-fit-" in n for n in runs)
    assert "NESTED neuraldbg: observe() blocks cannot be nested" in r.stdout
    assert not (tmp_path / "inner").exists()
    interrupted = json.loads((tmp_path / "interrupted" / "meta.json").read_text())
    assert interrupted["status"] == "failed" and interrupted["exit_status"] == 130 and interrupted["steps_observed"] == 10
    assert "INTERRUPT 130" in r.stdout
    stopped = json.loads((tmp_path / "stopped" / "meta.json").read_text())
    assert stopped["status"] == "stopped" and stopped["steps_observed"] < 40 and "STOPPED" in r.stdout


def test_child_processes_that_train_inside_a_block_are_observed_into_its_run(tmp_path):
    """Hogwild from a notebook or a program (fork, as a notebook can start them): the children's traces join the
    block's run and its verdict; once the block has ended a child process is not observed any more."""
    r = python("""
        import os, argparse, torch, torch.multiprocessing as mp, neuraldbg, hogwild
        args = argparse.Namespace(mode="nan_child", steps=30, procs=2, lr=0.05, seed=1)
        mp.set_start_method("fork", force=True)

        def hogwild_train():
            model = hogwild.Net(); model.share_memory()
            procs = [mp.Process(target=hogwild.train, args=(rank, args, model)) for rank in range(2)]
            [p.start() for p in procs]; [p.join() for p in procs]

        with neuraldbg.observe(run_dir="hog", quiet=True) as obs:
            hogwild_train()
        top = [(h.kind.value, h.origin.rank, h.origin.step) for h in obs.explain().hypotheses if h.confidence >= 0.5]
        print("TOP", top[:1], obs.explain().steps_observed, "NEURALDBG_CHILD" in os.environ)
        args.mode = "healthy"
        hogwild_train()  # after the block: not observed
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "TOP [('data_anomaly', 1, 12)] 60 False" in r.stdout, r.stdout + r.stderr
    assert sorted(p.name for p in (tmp_path / "hog").glob("meta.rank*.json")) == ["meta.rank0.json", "meta.rank1.json"]
    meta = json.loads((tmp_path / "hog" / "meta.json").read_text())
    assert meta["children"] == 2 and meta["mode"] == "api"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hog"]  # nothing written after the block


def test_cell_magic(tmp_path, tmp_path_factory):
    pytest.importorskip("IPython")
    r = python("""
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_line_magic("load_ext", "neuraldbg")
        ip.run_cell("import api_train")
        result = ip.run_cell("%%neuraldbg --run-dir cell -q\\nloss = api_train.train('vanishing')")
        obs = result.result
        print("HTML", "<iframe" in obs._repr_html_() and "vanishing_gradient" in obs._repr_html_())
        print("LOSS", ip.user_ns["loss"])
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "HTML True" in r.stdout
    assert events(tmp_path / "cell") == events(by_run("vanishing", tmp_path_factory))


def test_notebook_three_cells_three_verdicts_inline(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"import sys; sys.path[:0] = [{str(ASSETS)!r}, {str(ROOT)!r}]\n"
                                          "import api_train\n%load_ext neuraldbg")]
    nb.cells += [nbformat.v4.new_code_cell(f"%%neuraldbg --run-dir nb_{m}\napi_train.train({m!r})")
                 for m in ("healthy", "vanishing", "exploding")]
    # the three observations stay in the notebook's output history (Out): they must not keep the models alive
    nb.cells.append(nbformat.v4.new_code_cell(
        "import gc, torch\nfrom torch.nn.modules import module\ngc.collect()\n"
        "print('LIVE', sum(isinstance(o, torch.nn.Module) for o in gc.get_objects()),"
        " len(module._global_forward_hooks) + len(module._global_forward_pre_hooks))"))
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert "LIVE 0 0" in "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    shown = []
    for cell in nb.cells[1:-1]:
        html = "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)
        text = "".join(o.get("text", "") for o in cell.outputs)
        shown.append((html, text))
    assert "neuraldbg: healthy (40 steps observed)" in shown[0][1]
    assert "vanishing_gradient" in shown[1][0] and "<iframe" in shown[1][0]
    assert "exploding_gradient" in shown[2][0]


def test_lightning_callback_gives_the_verdict(tmp_path):
    pytest.importorskip("lightning")
    r = python("""
        import torch, lightning as L, api_train
        from neuraldbg.lightning import NeuraldbgCallback

        class Module(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net, self.opt, self.loss_fn = api_train.make("vanishing")
            def training_step(self, batch, i):
                return self.loss_fn(self.net(batch[0]), batch[1])
            def configure_optimizers(self):
                return self.opt

        cb = NeuraldbgCallback(run_dir="lit", quiet=True)
        trainer = L.Trainer(max_steps=40, callbacks=[cb], logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
        class Batches:  # the asset's batches as one iterable (a list would be a list of loaders)
            def __iter__(self):
                return api_train.batches("vanishing")
            def __len__(self):
                return api_train.STEPS

        trainer.fit(Module(), Batches())
        print("TOP", [h.kind.value for h in cb.last.explain().hypotheses if h.confidence >= 0.5][:1],
              cb.last.explain().steps_observed)
    """, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "TOP ['vanishing_gradient'] 40" in r.stdout


def test_hf_callback_stops_through_the_trainers_flag(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    r = python("""
        import torch, api_train
        from transformers import Trainer, TrainingArguments
        from neuraldbg.hf import NeuraldbgCallback

        class Fit(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = api_train.make("exploding")[0]
            def forward(self, x, labels):
                return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

        data = [{"x": x, "labels": y} for xb, yb in api_train.batches("exploding") for x, y in zip(xb, yb)]
        model = Fit()
        opt = torch.optim.SGD(model.parameters(), lr=0.4)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        cb = NeuraldbgCallback(run_dir="hf", stop_on="exploding_gradient", quiet=True)
        args = TrainingArguments("out", per_device_train_batch_size=64, max_steps=40, report_to=[], use_cpu=True,
                                 save_strategy="no", logging_strategy="no", disable_tqdm=True,
                                 max_grad_norm=0.0)  # no clipping: the script's lr is what it is
        trainer = Trainer(model=model, args=args, train_dataset=data, optimizers=(opt, sched), callbacks=[cb])
        out = trainer.train()
        print("STEPS", out.global_step, cb.last.stopped["step"], cb.last.exit_code)
        print("TOP", [h.kind.value for h in cb.last.explain().hypotheses if h.confidence >= 0.5][:1])
    """, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    steps, stopped_at, _ = r.stdout.split("STEPS ")[1].split()[:3]
    assert int(steps) < 40 and int(steps) == int(stopped_at) + 1  # the trainer's own flag ended it, cleanly
    assert "TOP ['exploding_gradient']" in r.stdout


def test_five_ways_one_verdict_the_same_events(tmp_path, tmp_path_factory):
    """One training (the asset's vanishing MLP on its batches) through `neuraldbg run`, `observe()`, the cell magic,
    the Lightning callback and the HF callback, the last four in one process: the same events, the same verdict
    (the trainers' models wrap the network as `net`, so their module names carry that prefix)."""
    for name in ("IPython", "lightning", "transformers", "accelerate"):
        pytest.importorskip(name)
    r = python("""
        import torch, lightning as L, api_train
        from torch.utils.data import IterableDataset
        from transformers import Trainer, TrainingArguments
        import neuraldbg
        from neuraldbg.lightning import NeuraldbgCallback as LitCallback
        from neuraldbg.hf import NeuraldbgCallback as HFCallback
        from IPython.testing.globalipapp import start_ipython

        with neuraldbg.observe(run_dir="observe", quiet=True):
            api_train.train("vanishing")

        ip = start_ipython()
        ip.run_line_magic("load_ext", "neuraldbg")
        ip.run_cell("import api_train")
        ip.run_cell("%%neuraldbg --run-dir magic -q\\napi_train.train('vanishing')")

        class Lit(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net, self.opt, self.loss_fn = api_train.make("vanishing")
            def training_step(self, batch, i):
                return self.loss_fn(self.net(batch[0]), batch[1])
            def configure_optimizers(self):
                return self.opt

        class Batches:
            def __iter__(self):
                return api_train.batches("vanishing")
            def __len__(self):
                return api_train.STEPS

        L.Trainer(max_steps=40, callbacks=[LitCallback(run_dir="lightning", quiet=True)], logger=False,
                  enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                  accelerator="cpu").fit(Lit(), Batches())

        class Fit(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net, self.opt, self.loss_fn = api_train.make("vanishing")
            def forward(self, x, labels):
                return {"loss": self.loss_fn(self.net(x), labels)}

        class Rows(IterableDataset):  # the same batches, row by row, in order: the trainer batches them again
            def __iter__(self):
                for xb, yb in api_train.batches("vanishing"):
                    yield from ({"x": x, "labels": y} for x, y in zip(xb, yb))

        model = Fit()
        sched = torch.optim.lr_scheduler.LambdaLR(model.opt, lambda s: 1.0)
        args = TrainingArguments("out", per_device_train_batch_size=64, max_steps=40, report_to=[], use_cpu=True,
                                 save_strategy="no", logging_strategy="no", disable_tqdm=True, max_grad_norm=0.0)
        Trainer(model=model, args=args, train_dataset=Rows(), optimizers=(model.opt, sched),
                callbacks=[HFCallback(run_dir="hf", quiet=True)]).train()
    """, tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]

    def unwrapped(rows: list[tuple]) -> list[tuple]:
        return [(t, s, (m or "").removeprefix("net."), a, b, site) for t, s, m, a, b, site in rows]

    reference = unwrapped(events(by_run("vanishing", tmp_path_factory)))
    assert reference and reference[0][:3] == ("gradient_health_transition", 0, "layers.0")
    for way in ("observe", "magic", "lightning", "hf"):
        assert unwrapped(events(tmp_path / way)) == reference, way
        assert [k for k, _ in verdict(tmp_path / way)] == [k for k, _ in verdict(by_run("vanishing", tmp_path_factory))]
