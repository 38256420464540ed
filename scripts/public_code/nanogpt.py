"""karpathy/nanoGPT: train.py with config/train_shakespeare_char.py (the README's "baby GPT" recipe: AdamW with
decay/no-decay groups, linear warm-up then cosine decay, grad clipping at 1.0, the GradScaler no-op on CPU), shrunk by
train.py's own `--key=value` flags to a 2-layer, 64-wide GPT on 64-character blocks so that a run takes ~30 s on one
CPU thread. Data: data/shakespeare_char/input.txt is written here (a play-like text from a small seeded grammar,
300,000 characters, 50 distinct; no download), then the repo's own data/shakespeare_char/prepare.py makes
train.bin / val.bin / meta.pkl from it (run with a stand-in `requests` module that refuses to fetch, since the script
imports requests for its download branch, which an existing input.txt skips). train.py steps once per iteration
`iter_num = 0..max_iters` (it breaks when iter_num > max_iters): max_iters + 1 optimizer steps."""
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = "karpathy/nanoGPT"
COMMIT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"


def _synth():
    spec = importlib.util.spec_from_file_location("_synth", Path(__file__).with_name("_synth.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_data(work: Path) -> None:
    d = work / "data" / "shakespeare_char"
    (d / "input.txt").write_text(_synth().english_like(300_000, seed=1234))
    with tempfile.TemporaryDirectory() as stub:
        Path(stub, "requests.py").write_text(
            "def get(*a, **k):\n    raise RuntimeError('no network here: input.txt must exist')\n")
        subprocess.run([sys.executable, str(d / "prepare.py")], check=True, capture_output=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": stub})


SMALL = ["--device=cpu", "--compile=False", "--eval_iters=10", "--eval_interval=100", "--log_interval=10",
         "--block_size=64", "--batch_size=12", "--n_layer=2", "--n_head=4", "--n_embd=64", "--dropout=0.0"]
ARGS = ["config/train_shakespeare_char.py", *SMALL, "--max_iters=400", "--lr_decay_iters=400"]

CASES = [
    {
        "name": "nanogpt_char_healthy",
        "script": "train.py", "args": ARGS, "data": make_data, "patch": None, "timeout": 180,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: the shakespeare_char config (AdamW lr 1e-3, warm-up 100, cosine to 1e-4, clip "
                    "1.0), small model by flags",
            "origins": None, "steps": None, "optimizer_steps": 401,
            "note": "plain run: loss 3.93 (iter 0) -> train/val 2.37/2.37 (100) -> 1.97/1.94 (200) -> 1.78/1.77 (300) "
                    "-> 1.72/1.71 (400); 401 steps (iter 0..400). Unigram entropy of the text 3.18 nats.",
        },
    },
    {
        "name": "nanogpt_char_accum_bias_dropout_healthy",
        "script": "train.py",
        "args": ["config/train_shakespeare_char.py", *SMALL[:-1], "--dropout=0.1", "--bias=True",
                 "--gradient_accumulation_steps=2", "--max_iters=200", "--lr_decay_iters=200", "--warmup_iters=50"],
        "data": make_data, "patch": None, "timeout": 180,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published, other flags: 2 micro-batches per step (loss / 2 each), biases on, dropout 0.1, "
                    "warm-up 50",
            "origins": None, "steps": None, "optimizer_steps": 201,
            "note": "plain run: loss 3.93 (iter 0) -> 2.73 (50) -> train/val 2.18/2.15 (100) -> 1.97/1.97 (200); "
                    "201 steps of 2 micro-batches each (402 backward passes).",
        },
    },
    {
        "name": "nanogpt_char_lr1_diverges",
        "script": "train.py", "args": ARGS, "data": make_data, "timeout": 180,
        "patch": {"file": "config/train_shakespeare_char.py",
                  "old": "learning_rate = 1e-3 #", "new": "learning_rate = 1.0 #",
                  "why": "peak learning rate 1000x the config's (\"with baby networks can afford to go a bit higher\")"},
        "label": {
            "healthy": False, "kinds": ["loss_divergence", "unstable_loss", "loss_plateau"],
            "root": "AdamW peak lr 1.0 (config: 1e-3): the loss falls while the warm-up lr is small, rises as the lr "
                    "reaches ~0.5-1, swings, and ends stuck near the unigram entropy",
            "origins": None, "steps": [30, 130], "optimizer_steps": 401, "lr": 1.0,
            "note": "plain run: loss 3.93 (iter 0) -> 3.06 (iter 40, lr 0.4) -> 3.39 (60) -> 4.67 (90) -> 5.48 (100) "
                    "-> 6.27/4.52/6.56 (110-140) -> 3.42 (180) -> 3.0-3.15 from iter 220 to the end (3.04 at 400; "
                    "healthy: 1.74). Unigram entropy of the text 3.18 nats.",
        },
    },
    {
        "name": "nanogpt_char_loss_sign_flipped",
        "script": "train.py", "args": ARGS, "data": make_data, "timeout": 180,
        "patch": {"file": "train.py",
                  "old": "loss = loss / gradient_accumulation_steps",
                  "new": "loss = -loss / gradient_accumulation_steps",
                  "why": "the loss's sign flipped before backward: gradient ascent on the cross-entropy"},
        "label": {
            "healthy": False, "kinds": ["loss_misuse", "loss_divergence"],
            "root": "the loss backpropagated is -cross_entropy: the optimizer maximises the cross-entropy; the "
                    "minimised value goes negative without bound",
            "origins": None, "steps": [0, 20], "optimizer_steps": 401, "lr": 1e-3,
            "note": "plain run: the printed (minimised) loss -3.93 (iter 0) -> -5.03 (50) -> -9.72 (100) -> -23.6 "
                    "(200) -> -35.1 (400); the eval's true cross-entropy 3.92 (0) -> 9.69 (100) -> 23.9 (200) -> "
                    "32.2 (300) -> 35.4 (400); exit 0.",
        },
    },
    {
        "name": "nanogpt_char_layernorm_zero_gain",
        "script": "train.py", "args": ARGS, "data": make_data, "timeout": 180,
        "patch": {"file": "model.py",
                  "old": "self.weight = nn.Parameter(torch.ones(ndim))",
                  "new": "self.weight = nn.Parameter(torch.zeros(ndim))",
                  "why": "LayerNorm gain initialised to zeros instead of ones"},
        "label": {
            "healthy": False, "kinds": ["normalization_fault", "vanishing_gradient", "loss_plateau"],
            "root": "every LayerNorm (bias=False) outputs exactly 0 at init, so attention, MLP and lm_head get zero "
                    "input and zero weight gradients; only the LayerNorm gains get a gradient, and the model "
                    "predicts the uniform distribution until they grow",
            "origins": None, "steps": [0, 10], "optimizer_steps": 401, "lr": 1e-3,
            "note": "plain run: loss 3.9120 (= ln 50, uniform) flat to iter 30 (3.9111), 3.90 at 50, then slowly "
                    "3.62 (100), 2.83 (200), 2.57 (300), 2.51 (400); healthy: 1.74 at 400.",
        },
    },
]
