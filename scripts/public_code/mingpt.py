"""karpathy/minGPT: the two projects that train (projects/adder: a GPT that learns 2-digit addition from data it
generates itself; projects/chargpt: a character-level GPT on input.txt), run through their own CfgNode flags
(`--trainer.max_iters=N --model.model_type=gpt-nano ...`) with the repo root on PYTHONPATH (as `pip install -e .`
would give). Trainer: AdamW with decay/no-decay groups, clip 1.0, a DataLoader over an infinite RandomSampler, one
optimizer step per batch until `iter_num >= max_iters` (max_iters steps); the project's callback evaluates
(adder: greedy addition on the whole train and test split; chargpt: a 500-character sample) when iter_num % 500 == 0,
i.e. after the first step. chargpt's input.txt is written here: a play-like text from a small seeded grammar
(200,000 characters; about one sentence in 8 opens with "O God, ", since chargpt's sampling
prompt is "O God, O God!"; no download). Both scripts seed everything (system.seed 3407)."""
import importlib.util
from pathlib import Path

REPO = "karpathy/minGPT"
COMMIT = "37baab71b9abea1b76ab957409a1cc2fbfba8a26"


def _synth():
    spec = importlib.util.spec_from_file_location("_synth", Path(__file__).with_name("_synth.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_chars(work: Path) -> None:
    (work / "projects" / "chargpt" / "input.txt").write_text(_synth().english_like(200_000, seed=4321, oaths=True))


ENV = {"PYTHONPATH": "{work}"}
ADDER = ["--trainer.max_iters=400", "--trainer.device=cpu"]
CHAR = ["--model.model_type=gpt-nano", "--data.block_size=32", "--trainer.batch_size=32",
        "--trainer.max_iters=300", "--trainer.num_workers=0", "--trainer.device=cpu"]

CASES = [
    {
        "name": "mingpt_adder_healthy",
        "script": "projects/adder/adder.py", "cwd": "projects/adder", "args": ADDER, "env": ENV,
        "data": None, "patch": None, "timeout": 180,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published (gpt-nano, AdamW lr 5e-4, 4 DataLoader workers), 400 steps",
            "origins": None, "steps": None, "optimizer_steps": 400, "note": "plain run: loss 2.31 (iter 0) -> 1.80 (50) -> 1.63 (100) -> 1.55 (180), 1.52-1.55 to iter 330 (the slow phase before the carry is learnt), then 1.49 (350) -> 1.40 (390); eval after step 1: 17/9500 train, 0/500 test. 400 steps.",
        },
    },
    {
        "name": "mingpt_adder_softmax_into_cross_entropy",
        "script": "projects/adder/adder.py", "cwd": "projects/adder", "args": ADDER, "env": ENV,
        "data": None, "timeout": 180,
        "patch": {"file": "mingpt/model.py",
                  "old": "loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)",
                  "new": "loss = F.cross_entropy(F.softmax(logits, dim=-1).view(-1, logits.size(-1)), "
                         "targets.view(-1), ignore_index=-1)",
                  "why": "softmax applied before F.cross_entropy (which applies log_softmax itself)"},
        "label": {
            "healthy": False, "kinds": ["loss_misuse", "loss_plateau"],
            "root": "cross_entropy gets probabilities, not logits: its log_softmax of values in [0, 1] is nearly "
                    "uniform, the loss cannot go far below ln 10 and its gradient is tiny",
            "origins": None, "steps": [0, 20], "optimizer_steps": 400, "lr": 5e-4, "note": "plain run: loss 2.303 (iter 0) -> 2.16 (50) -> 2.07 (100) -> 2.03 (160), then flat 2.02-2.03 to iter 390 (healthy: 1.40 at 390 and still falling). 400 steps.",
        },
    },
    {
        "name": "mingpt_chargpt_healthy",
        "script": "projects/chargpt/chargpt.py", "cwd": "projects/chargpt", "args": CHAR, "env": ENV,
        "data": make_chars, "patch": None, "timeout": 180,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published (AdamW lr 5e-4), gpt-nano on 32-character blocks by flags",
            "origins": None, "steps": None, "optimizer_steps": 300, "note": "plain run: loss 3.93 (iter 0) -> 2.93 (50) -> 2.49 (100) -> 2.11 (200) -> 1.84 (290). Unigram entropy of the text 3.18, ln(vocab 51) = 3.93. 300 steps.",
        },
    },
    {
        "name": "mingpt_chargpt_lr_too_high",
        "script": "projects/chargpt/chargpt.py", "cwd": "projects/chargpt", "args": CHAR, "env": ENV,
        "data": make_chars, "timeout": 180,
        "patch": {"file": "projects/chargpt/chargpt.py",
                  "old": "C.trainer.learning_rate = 5e-4", "new": "C.trainer.learning_rate = 5e-1",
                  "why": "learning rate 1000x the project's"},
        "label": {
            "healthy": False, "kinds": ["loss_divergence", "unstable_loss", "loss_plateau"],
            "root": "AdamW lr 0.5 (project: 5e-4), no warm-up: the loss blows up in the first steps, then the model "
                    "never gets below the unigram entropy",
            "origins": None, "steps": [0, 12], "optimizer_steps": 300,
            "lr": 0.5, "note": "plain run: loss 3.93 (iter 0) -> 16.9 (iter 10) -> 6.52 (20) -> 4.30 (40) -> 3.45 (50), then 3.11-3.39 to the end (3.13 at 290; healthy 1.84), i.e. no better than the unigram entropy 3.18. 300 steps, exit 0.",
        },
    },
    {
        "name": "mingpt_chargpt_optimizer_no_decay_group_only",
        "script": "projects/chargpt/chargpt.py", "cwd": "projects/chargpt", "args": CHAR, "env": ENV,
        "data": make_chars, "timeout": 180,
        "patch": {"file": "mingpt/model.py",
                  "old": "optimizer = torch.optim.AdamW(optim_groups, lr=",
                  "new": "optimizer = torch.optim.AdamW(optim_groups[1:], lr=",
                  "why": "optimizer built over the no-decay group only: every Linear weight left out"},
        "label": {
            "healthy": False, "kinds": ["unchanged_weights", "loss_plateau"],
            "root": "the optimizer holds only biases, LayerNorm and embedding weights; every nn.Linear weight "
                    "(attention, MLP, lm_head) gets a gradient but never changes",
            "origins": None, "steps": [0, 10], "optimizer_steps": 300, "lr": 5e-4, "note": "plain run: loss 3.93 (iter 0) -> 3.74 (10) -> 3.54 (100) -> 3.49 (200) -> 3.44 (290); healthy 1.84 at 290, unigram entropy 3.18. 300 steps.",
        },
    },
]
