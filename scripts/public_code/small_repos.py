"""vinhkhuc/PyTorch-Mini-Tutorials (Alec Radford's Theano tutorials ported to PyTorch): 1_linear_regression.py
(nn.Linear(1, 1, bias=False) fitted to y = 2x + noise on 101 points, MSE, SGD lr 0.01 momentum 0.9, batch 10,
100 epochs = 1000 steps) and 2_logistic_regression.py (784 -> 10 linear, no bias, CrossEntropyLoss, SGD lr 0.01
momentum 0.9, batch 100, 100 epochs over 60000 images = 60000 steps). Both seed torch (manual_seed(42)) and take
no flags. The sibling module small_repos_ngvideo.py holds karpathy/ng-video-lecture's bigram.py (a module gives
one REPO/COMMIT to all its cases, so one repository per module).

Data: data_util.load_mnist reads datasets/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz and reshapes
exactly 60000 train and 10000 test images (no argument changes that), so make_mnist_gz writes the four gzipped idx
files with those counts: the seven-segment glyph digits of pytorch_examples.py (class template, random shift,
stroke width and brightness, pixel noise; fixed seed). They are easy: the published logistic regression reaches
100% test accuracy in its first epoch.

1_linear_regression.py exits 1 on every run, after training: its last line `"w = %.2f" % w.numpy()` formats a
(1, 1) array, a TypeError under numpy 2 (the environment has 2.4). Its labels say exit 1.

Left out, too slow as published on one CPU thread and without flags to shorten them (their loops and the
60000-image array are hard-coded): 3_neural_net.py (100 epochs x 600 steps, ~1.6 s an epoch: ~160 s),
4_modern_neural_net.py (~8 s an epoch x 100), 5_convolutional_net.py (~15 s an epoch x 20), 6_lstm.py (>25 s an
epoch x 20); 0_multiply.py does not train. devnag/pytorch-generative-adversarial-networks' gan_pytorch.py was tried
and left out too: 5000 epochs x (20 D + 20 G) steps = 200000 optimizer steps took ~170 s of CPU (4000 epochs in
200 s wall), no flags; its fake distribution was also not at the real one (mean 5.8-6.5 against 4.0, std 0.5-0.7
against 1.25, at epochs 1800-3900), not a clean healthy run.

Broken-variant candidates dropped because their plain runs did not fail: SGD lr 1 (100x) in 1_linear_regression
(loss 0.114 per epoch from epoch ~10, w = 1.84, like the published 0.105); SGD lr 10 (1000x) in
2_logistic_regression (the loss jumps 2.3 -> 183 in 5 steps, then falls to 0 by step ~200: 100% test accuracy,
the convex problem on separable data recovers).

Figures in the notes: per-step losses and every optimizer step recorded from outside the script by a runpy
wrapper (not neuraldbg), and the harness's own `--plain` run (its printed epoch costs). Labels decided from those
before neuraldbg saw the cases."""
import gzip
import importlib.util
import struct
from pathlib import Path

REPO = "vinhkhuc/PyTorch-Mini-Tutorials"
COMMIT = "bb967869a6ad2c3919b67b0623ce33e36349d413"

LIN = "1_linear_regression.py"
LOG = "2_logistic_regression.py"


def _glyphs():
    spec = importlib.util.spec_from_file_location("_pe_glyphs", Path(__file__).with_name("pytorch_examples.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._glyphs


def make_mnist_gz(work):
    """datasets/mnist/*.gz as data_util.load_mnist reads them: 60000 train and 10000 test glyph digits (seed 0)."""
    import numpy as np
    rng = np.random.default_rng(0)
    glyphs = _glyphs()
    d = work / "datasets" / "mnist"
    d.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", 60000), ("t10k", 10000)):
        imgs, labels = glyphs(n, rng)
        with gzip.open(d / f"{prefix}-images-idx3-ubyte.gz", "wb", compresslevel=1) as f:
            f.write(struct.pack(">iiii", 2051, n, 28, 28) + imgs.tobytes())
        with gzip.open(d / f"{prefix}-labels-idx1-ubyte.gz", "wb", compresslevel=1) as f:
            f.write(struct.pack(">ii", 2049, n) + labels.tobytes())


def case(name, script, label, patch=None):
    data = make_mnist_gz if script == LOG else None
    return {"name": name, "script": script, "args": [], "cwd": ".", "data": data, "env": {}, "patch": patch,
            "timeout": 120, "label": dict({"seeded": True, "origins": None, "exit": 1 if script == LIN else 0},
                                          **label)}


CASES = [
    case("vinhkhuc_linreg_healthy", LIN, {
        "healthy": True, "kinds": [],
        "root": "as published: nn.Linear(1, 1, bias=False) fitted to y = 2x + 0.33 noise on 101 points, MSE, SGD "
                "lr 0.01 momentum 0.9, batch 10 in x order",
        "steps": None, "optimizer_steps": 1000,
        "note": "100 epochs x 10 batches = 1000 steps. Traced: loss 6.90 (step 0), 4.42, 1.46, 0.84, 0.34, 0.11 "
                "(step 5), then per batch between 0.04 and 0.21 in the same cycle every epoch (the batches walk "
                "the x range in order, the momentum rings for ~30 steps); weight 0.83 after the first step, 1.98 from "
                "step ~100 on. "
                "Harness --plain: printed epoch cost 2.33 (1), 1.03 (2), 0.259 (3), 0.110 (4), 0.1053 (10), 0.10515 "
                "(20 ... 100); then the final print raises TypeError: exit 1, ~5 s.",
    }),
    case("vinhkhuc_linreg_lr1000x", LIN, patch={
        "file": LIN,
        "old": "optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)",
        "new": "optimizer = optim.SGD(model.parameters(), lr=10, momentum=0.9)",
        "why": "learning rate 1000x too large (SGD lr 10 instead of 0.01)"}, label={
        "healthy": False, "kinds": ["loss_divergence", "exploding_gradient", "non_finite"],
        "root": "SGD lr 10 (published 0.01) on a 1-weight MSE whose curvature is ~2 mean(x^2) ~ 0.7: every step "
                "overshoots many times over, the weight and the loss grow geometrically to inf, then NaN",
        "steps": [0, 5], "optimizer_steps": 1000, "lr": 10, "mention": r"learning rate|\blr\b",
        "note": "Traced: loss 6.90 (step 0), 991 (1), 3.4e4 (2), 1.4e5 (3), 6.2e6 (10), 6.4e12 (20), 6.8e30 (50), "
                "inf from step 61, NaN from step 123 to the end (1000 steps, the script keeps stepping). "
                "Harness --plain: printed epoch cost 4.2e4 (1), 3.5e10 (2), 3.6e16 (3), 3.8e28 (5), inf (10), nan (20 "
                "... 100); exit 1 (the final print).",
    }),
    case("vinhkhuc_linreg_no_zero_grad", LIN, patch={
        "file": LIN,
        "old": "    optimizer.zero_grad()\n",
        "new": "",
        "why": "optimizer.zero_grad() left out of train(): every step's gradient adds to all earlier ones"}, label={
        "healthy": False,
        "kinds": ["loop_misuse", "loss_divergence", "exploding_gradient", "unstable_loss", "non_finite"],
        "root": "no optimizer.zero_grad(): .grad holds the sum of every past gradient, and with momentum 0.9 the "
                "steps keep growing; the single weight oscillates with a growing amplitude and the loss climbs "
                "to inf",
        "steps": [0, 20], "optimizer_steps": 1000, "lr": 0.01, "mention": r"zero_grad|accumulat",
        "note": "Traced: loss 6.90 (step 0), 0.086 (5), 0.038 (9, the lowest), 0.62 (10), 1.65 (12), 17 (18), 40 "
                "(20), 504 (50), 1.5e5 (100), 2.9e10 (200), 7.4e25 (500), inf from step 710; weight norm 0.83 -> "
                "326 (step 100) -> 1.4e13 (500) -> inf. "
                "Harness --plain: printed epoch cost 1.49 (1), 6.44 (2), 9.0 (3), 73.6 (4), 101 (5), 8.3e4 (10), "
                "7.5e9 (20), 2.8e15 (30), 4.4e25 (50), 3.2e36 (70), inf (100); exit 1 (the final print).",
    }),
    case("vinhkhuc_logreg_healthy", LOG, {
        "healthy": True, "kinds": [],
        "root": "as published: 784 -> 10 linear (no bias), CrossEntropyLoss, SGD lr 0.01 momentum 0.9, batch 100, "
                "100 epochs",
        "steps": None, "optimizer_steps": 60000,
        "note": "60000 images / 100 = 600 steps an epoch x 100 = 60000 steps. Traced: loss 2.30 (step 0), 2.14 "
                "(10), 1.33 (50), 0.82 (100), 0.27 (500), 0.135 (1000), 0.030 (5000), 0.0081 (20000), 0.0035 "
                "(59999); weight norm 1.8 -> 25.5. "
                "Harness --plain: printed epoch cost 0.562 (1), 0.151 (2), 0.0552 (5), 0.0276 (10), 0.0144 (20), "
                "0.0062 (50), 0.0033 (100), test accuracy 100% from epoch 1; exit 0, 28-40 s (shared machine).",
    }),
    case("vinhkhuc_logreg_softmax_into_ce", LOG, patch={
        "file": LOG,
        "old": "    return model\n",
        "new": "    model.add_module(\"softmax\", torch.nn.Softmax(dim=1))\n    return model\n",
        "why": "a Softmax layer added after the linear layer although CrossEntropyLoss applies log-softmax itself "
               "(the script's own comment says so)"}, label={
        "healthy": False, "kinds": ["loss_misuse", "loss_plateau", "saturated_activation"],
        "root": "probabilities, not logits, go into CrossEntropyLoss: with 10 classes the loss cannot go below "
                "-log(e / (e + 9)) = 1.4612, and the softmax's gradient is small, so it crawls to that floor",
        "steps": [0, 1000], "optimizer_steps": 60000, "lr": 0.01, "mention": r"softmax",
        "note": "Traced: loss 2.30 (steps 0-20), 2.29 (50), 2.25 (100), 1.93 (500), 1.83 (1000), 1.70 (5000), 1.60 "
                "(20000), 1.466 (59999); epoch means 2.08 (1), 1.61 (10), 1.57 (30), 1.475 (50), 1.465 (100): at "
                "the 1.4612 floor, against 0.0033 for the published script. "
                "Harness --plain: printed epoch cost 2.076 (1), 1.818 (2), 1.684 (5), 1.613 (10), 1.572 (20), 1.475 "
                "(50), 1.465 (100); test accuracy 69.6% (1), 80.5% (3-5), 90.4% (10-30), 100% from ~50 (published: "
                "100% from epoch 1); exit 0.",
    }),
    case("vinhkhuc_logreg_labels_shuffled", LOG, patch={
        "file": LOG,
        "old": "trY = torch.from_numpy(trY).long()",
        "new": "trY = torch.from_numpy(trY).long()[torch.randperm(len(trY))]",
        "why": "the training labels shuffled on their own, apart from the images: every image gets a random "
               "image's label"}, label={
        "healthy": False, "kinds": ["data_anomaly", "loss_plateau"],
        "root": "labels permuted independently of the images: nothing links input to target, the training loss "
                "stays at chance (ln 10 = 2.303) and the test accuracy at ~10%",
        "steps": [0, 600], "optimizer_steps": 60000, "lr": 0.01,
        "note": "Traced: loss 2.30 (step 0), 2.32 (10), 2.34 (50), 2.35 (1000), 2.34 (10000), 2.28 (59999); epoch "
                "means 2.319 (1), 2.297 (10), 2.278 (30), 2.266 (100) (a 7840-weight linear model memorises "
                "almost nothing of 60000 random labels), test accuracy ~9.4%. "
                "Harness --plain: printed epoch cost 2.319 (1), 2.306 (5), 2.297 (10), 2.285 (20), 2.271 (50), 2.266 "
                "(100); test accuracy 7.2% (1) -> 9.4% (100); exit 0.",
    }),
    case("vinhkhuc_logreg_weight_decay1", LOG, patch={
        "file": LOG,
        "old": "optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)",
        "new": "optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1.0)",
        "why": "weight_decay=1.0 (meant 1e-4 or so): the L2 pull outweighs the data gradient"}, label={
        "healthy": False, "kinds": ["loss_plateau", "unchanged_weights"],
        "root": "SGD weight_decay=1 holds the weights near zero (norm 1.8 -> 0.56): the loss stops at 1.987 "
                "from step ~50 and never moves again; test accuracy 62%",
        "steps": [0, 300], "optimizer_steps": 60000, "lr": 0.01, "mention": r"weight.?decay",
        "note": "Traced: loss 2.30 (step 0), 2.15 (10), 2.00 (20), 1.91 (33, the lowest), 1.98 (50), 1.987 "
                "(100 ... 59999, within 0.02), epoch means 1.992 (1), 1.987 (2 ... 100); weight norm 1.81 (step "
                "0), 0.556 from step ~6000 on. Test accuracy 62.2% (published: 100%, loss 0.0033). "
                "Harness --plain: printed epoch cost 1.9916 (1), 1.986891 (2 ... 100, every digit the same); test "
                "accuracy 62.21% in every epoch; exit 0.",
    }),
    case("vinhkhuc_logreg_no_zero_grad", LOG, patch={
        "file": LOG,
        "old": "    optimizer.zero_grad()\n",
        "new": "",
        "why": "optimizer.zero_grad() left out of train(): every step's gradient adds to all earlier ones"}, label={
        "healthy": False, "kinds": ["loop_misuse", "loss_divergence", "unstable_loss", "exploding_gradient"],
        "root": "no optimizer.zero_grad(): .grad holds the running sum of all gradients, so every step is as "
                "large as the whole history: the loss climbs from 2.3 to ~1000 in the first epochs and the "
                "weight norm grows without bound (1.8 -> 1.5e6); the separable data brings the loss back down "
                "only after ~30 epochs",
        "steps": [0, 50], "optimizer_steps": 60000, "lr": 0.01, "mention": r"zero_grad|accumulat",
        "note": "Traced: loss 2.30 (step 0), 1.28 (15, the early low), 4.7 (29), 14.5 (50), 157 (100), 292 (200), "
                "1583 (700), 931 (1000), 267 (2000), 43 (5000), 0 at step ~10000 with bursts later; epoch means "
                "408 (1), 736 (2), 458 (3), 195 (5), 49 (10), 12.8 (20), 3.2 (30), 0.38 (50), 0.076 (100), "
                "against 0.56 -> 0.0033 for the published script; weight norm 1.8 -> 1.4e5 (step 6000) -> 1.5e6 "
                "(54000), still growing linearly. "
                "Harness --plain: printed epoch cost 407.9 (1), 735.5 (2), 457.8 (3), 194.6 (5), 49.0 (10), 12.8 "
                "(20), 3.21 (30), 0.384 (50), 0.690 (70), 0.0759 (100); test accuracy 63.9% (1), 82.6% (2), 94.1% "
                "(5), 98.9% (10), 99.9-100% from 30; exit 0.",
    }),
]
