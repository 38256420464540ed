"""yunjey/pytorch-tutorial: the two `tutorials/*/main.py` that need no torchvision (the MNIST/CIFAR ones import
torchvision.datasets, which does not import beside this project's CPU torch 2.13 here, so they are left out):
01-basics/linear_regression (nn.Linear(1, 1) on its own 15-point toy set, MSE, SGD lr 0.001, 60 full-batch steps;
no seed) and 02-intermediate/language_model (the word-level LSTM language model after pytorch/examples:
Embedding 128, LSTM 1024, truncated BPTT over 30-token windows of a batch of 20 streams, Adam lr 0.002,
clip_grad_norm_ 0.5, 5 epochs, then 1000 words sampled into sample.txt). The language model reads
`data/train.txt` (Penn Treebank in the original, one sentence a line): `make_corpus` writes one from a tiny English
grammar, sized so each epoch has exactly 5 windows (25 optimizer steps in all; about a minute on one CPU thread).
Neither script takes flags. The mirror lacks the data/train.txt blob: ARCHIVE_PATHS limits the export."""
import random

REPO = "yunjey/pytorch-tutorial"
COMMIT = "0500d3df5a2a8080ccfccbc00aca0eacc21818db"
# the snapshot's language_model/data/train.txt blob is absent from the mirror, so a whole-tree `git archive` fails;
# a harness that honours this exports only these pathspecs
ARCHIVE_PATHS = ["tutorials/01-basics/linear_regression", "tutorials/02-intermediate/language_model/main.py",
                 "tutorials/02-intermediate/language_model/data_utils.py"]

LINREG = "tutorials/01-basics/linear_regression"
LM = "tutorials/02-intermediate/language_model"

# main.py: batch_size 20, seq_length 30, `for i in range(0, ids.size(1) - seq_length, seq_length)`; ids is the
# token stream cut to a multiple of 20 and viewed as 20 rows. 3020-3039 tokens -> rows of 151 -> windows at
# 0, 30, 60, 90, 120 -> 5 steps per epoch, 5 epochs.
LM_TOKENS = 3020
LM_STEPS = 5 * 5


def make_corpus(work):
    """data/train.txt for the language model: sentences (determiner, optional adjective, noun, verb, determiner,
    noun, optional prepositional phrase) from a fixed seed, one per line; the script appends <eos> to each line.
    34 word types; the next word is predictable from the grammar (a trained model reaches ~1.55 nats/word against
    ln 34 = 3.5 at the start)."""
    rng = random.Random(1234)
    det = ["the", "a", "every", "some"]
    adj = ["small", "big", "red", "old", "quiet", "happy"]
    noun = ["cat", "dog", "bird", "man", "woman", "child", "horse", "king"]
    verb = ["sees", "likes", "chases", "finds", "helps", "follows"]
    prep = ["near", "behind", "under", "with"]
    place = ["house", "river", "garden", "tree", "road"]
    lines, n = [], 0
    while n < LM_TOKENS:
        s = [rng.choice(det)]
        if rng.random() < 0.5:
            s.append(rng.choice(adj))
        s += [rng.choice(noun), rng.choice(verb), rng.choice(det), rng.choice(noun)]
        if rng.random() < 0.5:
            s += [rng.choice(prep), "the", rng.choice(place)]
        lines.append(" ".join(s))
        n += len(s) + 1  # + <eos>
    assert LM_TOKENS <= n < LM_TOKENS + 20, n
    d = work / LM / "data"
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.txt").write_text("\n".join(lines) + "\n")


CASES = [
    {
        "name": "yunjey_linreg_healthy",
        "script": f"{LINREG}/main.py",
        "args": [], "cwd": LINREG, "data": None, "env": {}, "patch": None, "timeout": 120,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: nn.Linear(1, 1), MSE on 15 toy points, SGD lr 0.001, full batch",
            "seeded": False, "origins": None, "steps": None, "optimizer_steps": 60,
            "note": "`for epoch in range(num_epochs)`, num_epochs = 60, one step each; unseeded. 7 plain runs: "
                    "loss 2-60 at the start, 2.2-29.6 at epoch 5, 0.19-0.77 at 30, 0.17-0.45 at 60, still falling "
                    "slowly (the bias direction is ill-conditioned at lr 0.001; the least-squares floor is ~0.17). "
                    "E.g. 60.1 -> 29.3 -> 0.50 -> 0.179.",
        },
    },
    {
        "name": "yunjey_linreg_lr100x_diverges",
        "script": f"{LINREG}/main.py",
        "args": [], "cwd": LINREG, "data": None, "env": {}, "timeout": 120,
        "patch": {"file": f"{LINREG}/main.py",
                  "old": "learning_rate = 0.001",
                  "new": "learning_rate = 0.1",
                  "why": "learning rate 100x too large (0.1 instead of 0.001) for inputs up to 10.8"},
        "label": {
            "healthy": False, "kinds": ["loss_divergence", "exploding_gradient", "non_finite"],
            "root": "SGD lr 0.1 on unnormalised inputs (x up to 10.8): each step multiplies the error by ~8",
            "seeded": False, "origins": None, "steps": [0, 22], "optimizer_steps": 60, "lr": 0.1,
            "mention": r"learning rate|\blr\b",
            "note": "plain run: loss 0.61, 16, 918 (step 2), 3.1e6 (epoch 5), 9.7e32 (epoch 20), inf from step "
                    "22, NaN from epoch ~45 to 60; exit 0.",
        },
    },
    {
        "name": "yunjey_lstm_lm_healthy",
        "script": f"{LM}/main.py",
        "args": [], "cwd": LM, "data": make_corpus, "env": {}, "patch": None, "timeout": 240,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: Embedding 128 + LSTM 1024 word LM, truncated BPTT 30, Adam lr 0.002, "
                    "clip_grad_norm_ 0.5",
            "seeded": False, "origins": None, "steps": None, "optimizer_steps": LM_STEPS,
            "note": "5 epochs x 5 windows = 25 steps (see LM_TOKENS). plain run: loss 3.52 (step 0), 3.34, 3.45, "
                    "2.48 (6), 1.72 (12), 1.57 (18), 1.52 (24); printed epoch starts 3.52, 2.68, 1.85, 1.66, 1.60; "
                    "1000 words sampled; exit 0, ~55 s.",
        },
    },
    {
        "name": "yunjey_lstm_lm_lr1000x",
        "script": f"{LM}/main.py",
        "args": [], "cwd": LM, "data": make_corpus, "env": {}, "timeout": 240,
        "patch": {"file": f"{LM}/main.py",
                  "old": "learning_rate = 0.002",
                  "new": "learning_rate = 2",
                  "why": "learning rate 1000x too large (2 instead of 0.002) for Adam"},
        "label": {
            "healthy": False, "kinds": ["loss_divergence", "unstable_loss", "exploding_gradient", "non_finite"],
            "root": "Adam lr 2 (published 0.002): the first update moves every weight by ~2, the loss jumps from "
                    "3.5 to hundreds and never recovers; sampling then dies on inf probabilities",
            "seeded": False, "origins": None, "steps": [0, 3], "optimizer_steps": LM_STEPS, "lr": 2,
            "mention": r"learning rate|\blr\b", "exit": 1,
            "note": "plain run: loss 3.52 (step 0), 320 (1), 499 (2), 662 (6), 844 (12), 642 (18), 468 (24); "
                    "printed epoch starts 3.52, 571, 808, 767, 636 (perplexity inf; a second, unseeded run: 403, "
                    "686, 844, 817); after training the sampling "
                    "loop's output.exp() overflows and torch.multinomial raises 'probability tensor contains "
                    "either inf, nan or element < 0': exit 1 after all 25 steps.",
        },
    },
]
