"""MorvanZhou/PyTorch-Tutorial: the `tutorial-contents/` scripts that make their own synthetic data and need no
torchvision or gym: 301 (1-10-1 ReLU regression of y = x^2 + noise, full batch, SGD lr 0.2, 200 steps), 302 (two
Gaussian blobs, 2-10-2 ReLU classifier, CrossEntropyLoss, SGD lr 0.02, 100 steps), 403 (an nn.RNN reading sin to
predict cos, hidden state carried and detached, Adam lr 0.02, 100 steps) and 503 (two 1-300-300-1 nets on 20 noisy
points, one with Dropout(0.5), each its own Adam lr 0.01, 500 iterations). They take no flags, plot with
matplotlib every few steps (MPLBACKEND=Agg: plt.pause only sleeps) and print no loss. They are unseeded (the seed
lines are commented out in the published scripts): the loss figures in the notes come from 1-2 plain runs each,
read by recording every `loss.backward()` value and every optimizer step from outside the script (a runpy wrapper,
not neuraldbg); each label held in every run. 504_batch_normalization is left out: as published its no-BatchNorm
network (8 tanh layers, bias init -0.2, chosen by the tutorial to show the problem) stalls at the mean predictor
(test-set MSE ~680 from epoch 2 to 12 while the BN twin goes 1018 -> 84), so it is neither a healthy run nor a
one-line bug. The mirror lacks the MNIST blobs: ARCHIVE_PATHS limits the export to the scripts."""
REPO = "MorvanZhou/PyTorch-Tutorial"
COMMIT = "dbe154a9e56635e51c6b0c2ccea8ae36cfb585a7"
# the snapshot's tutorial-contents/mnist/* blobs are absent from the mirror, so a whole-tree `git archive` fails;
# a harness that honours this exports only these pathspecs
ARCHIVE_PATHS = ["tutorial-contents/*.py"]

CWD = "tutorial-contents"

CASES = [
    {
        "name": "morvan_regression_healthy",
        "script": "tutorial-contents/301_regression.py",
        "args": [], "cwd": CWD, "data": None, "env": {}, "patch": None, "timeout": 180,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: 1-10-1 ReLU net, full-batch MSE on y = x^2 + 0.2*U(0,1), SGD lr 0.2",
            "seeded": False, "origins": None, "steps": None, "optimizer_steps": 200,
            "note": "`for t in range(200)`, one step each. 2 plain runs: loss 0.53 -> 0.058 (step 20) -> 0.0081 "
                    "(100) -> 0.0059 (199); 0.10 -> 0.080 (20) -> 0.010 (100) -> 0.0051 (199) (noise floor "
                    "0.2^2/12 = 0.0033).",
        },
    },
    {
        "name": "morvan_regression_lr100x_diverges",
        "script": "tutorial-contents/301_regression.py",
        "args": [], "cwd": CWD, "data": None, "env": {}, "timeout": 180,
        "patch": {"file": "tutorial-contents/301_regression.py",
                  "old": "optimizer = torch.optim.SGD(net.parameters(), lr=0.2)",
                  "new": "optimizer = torch.optim.SGD(net.parameters(), lr=20)",
                  "why": "learning rate 100x too large (20 instead of 0.2)"},
        "label": {
            "healthy": False, "kinds": ["loss_divergence", "exploding_gradient", "non_finite"],
            "root": "SGD lr 20 (published 0.2): the first update overshoots and every later one grows",
            "seeded": False, "origins": None, "steps": [0, 12], "optimizer_steps": 200, "lr": 20,
            "mention": r"learning rate|\blr\b",
            "note": "2 plain runs: loss 1.67, 1.6e5, 2.6e8 (step 2), inf by step ~11, NaN from step 11-12 to the "
                    "end (200 steps, exit 0); 0.27, 2.5e4, 3.9e7, first non-finite at step 12.",
        },
    },
    {
        "name": "morvan_regression_hidden_detached",
        "script": "tutorial-contents/301_regression.py",
        "args": [], "cwd": CWD, "data": None, "env": {}, "timeout": 180,
        "patch": {"file": "tutorial-contents/301_regression.py",
                  "old": "x = F.relu(self.hidden(x))      # activation function for hidden layer",
                  "new": "x = F.relu(self.hidden(x)).detach()      # activation function for hidden layer",
                  "why": "a .detach() left on the hidden activation cuts the graph: the hidden layer never gets "
                         "a gradient and keeps its random init; only the output layer trains"},
        "label": {
            "healthy": False, "kinds": ["no_gradient", "unchanged_weights"],
            "root": "the hidden Linear gets no gradient (its output is detached); it stays at its random init",
            "seeded": False, "origins": ["hidden"], "steps": [0, 2], "optimizer_steps": 200, "lr": 0.2,
            "note": "2 plain runs: loss 0.51 -> 0.068 (step 20) -> 0.039 (100) -> 0.021 (199); 0.33 -> 0.064 -> "
                    "0.020 -> 0.0075. It still falls (a fit on 10 random, frozen ReLU features), ending 1.3-4x "
                    "above the published script's 0.005-0.006: a silent bug, visible in the gradients.",
        },
    },
    {
        "name": "morvan_classification_healthy",
        "script": "tutorial-contents/302_classification.py",
        "args": [], "cwd": CWD, "data": None, "env": {}, "patch": None, "timeout": 180,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: 2-10-2 ReLU net, CrossEntropyLoss on two Gaussian blobs, SGD lr 0.02",
            "seeded": False, "origins": None, "steps": None, "optimizer_steps": 100,
            "note": "`for t in range(100)`. 2 plain runs: loss 0.64 -> 0.32 (step 25) -> 0.19 (50) -> 0.091 (99); "
                    "0.88 -> 0.30 (25) -> 0.16 (50) -> 0.081 (99).",
        },
    },
    {
        "name": "morvan_classification_softmax_into_ce",
        "script": "tutorial-contents/302_classification.py",
        "args": [], "cwd": CWD, "data": None, "env": {}, "timeout": 180,
        "patch": {"file": "tutorial-contents/302_classification.py",
                  "old": "        x = self.out(x)\n",
                  "new": "        x = F.softmax(self.out(x), dim=1)\n",
                  "why": "softmax applied to the logits before CrossEntropyLoss (which applies log-softmax itself)"},
        "label": {
            "healthy": False, "kinds": ["loss_misuse", "loss_plateau", "saturated_activation"],
            "root": "probabilities, not logits, go into CrossEntropyLoss: the loss is bounded below by "
                    "~0.31 and its gradient shrinks as the softmax saturates",
            "seeded": False, "origins": None, "steps": [0, 5], "optimizer_steps": 100, "lr": 0.02,
            "mention": r"softmax",
            "note": "2 plain runs: loss 0.61 -> 0.52 (step 25) -> 0.45 (50) -> 0.39 (99); 0.74 -> 0.54 -> 0.44 -> "
                    "0.38, against 0.08-0.09 for the published script (the classes are separable either way).",
        },
    },
    {
        "name": "morvan_rnn_regressor_healthy",
        "script": "tutorial-contents/403_RNN_regressor.py",
        "args": [], "cwd": CWD, "data": None, "env": {}, "patch": None, "timeout": 180,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: nn.RNN(1, 32) + Linear per time step, sin -> cos, 10-step windows, hidden state "
                    "carried and detached, Adam lr 0.02",
            "seeded": False, "origins": None, "steps": None, "optimizer_steps": 100,
            "note": "`for step in range(100)`. 2 plain runs: loss 0.55, 0.63, 0.36 (step 2) -> 0.17 (25) -> 0.015 "
                    "(50) -> 0.0033 (75) -> 0.0023 (99); 0.53 -> 0.29 (25) -> 0.041 (50) -> 0.0011 (98), 0.024 "
                    "(99): single-window losses jump by design (each step is a new 10-point window).",
        },
    },
    {
        "name": "morvan_dropout_healthy",
        "script": "tutorial-contents/503_dropout.py",
        "args": [], "cwd": CWD, "data": None, "env": {}, "patch": None, "timeout": 180,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: two 1-300-300-1 ReLU nets on 20 noisy points of y = x, one with Dropout(0.5), "
                    "each with its own Adam lr 0.01; the undropped one overfits the training points by design",
            "seeded": False, "origins": None, "steps": None, "optimizer_steps": 500,
            "note": "`for t in range(500)`, two optimizers stepped in each iteration: one step per iteration as "
                    "the contract counts them (several optimizers stepped in one iteration are one step) -> 500 "
                    "(was 1000, counting optimizer.step() calls). plain run, mean training "
                    "loss per 50 iterations: plain net 0.19 -> 0.043 -> 0.019 -> 0.003; dropout net 0.29 -> "
                    "0.10, then flat at 0.10-0.11 (the noise variance 0.09: dropout noise by design).",
        },
    },
    {
        "name": "morvan_dropout_optimizer_wrong_net",
        "script": "tutorial-contents/503_dropout.py",
        "args": [], "cwd": CWD, "data": None, "env": {}, "timeout": 180,
        "patch": {"file": "tutorial-contents/503_dropout.py",
                  "old": "optimizer_drop = torch.optim.Adam(net_dropped.parameters(), lr=0.01)",
                  "new": "optimizer_drop = torch.optim.Adam(net_overfitting.parameters(), lr=0.01)",
                  "why": "copy-paste: the dropout net's optimizer is built over the other net's parameters, so "
                         "net_dropped is never updated (and net_overfitting is stepped twice per iteration)"},
        "label": {
            "healthy": False, "kinds": ["unchanged_weights", "loss_plateau"],
            "root": "net_dropped's parameters are in no optimizer: they get gradients every step and never change",
            "seeded": False, "origins": None, "steps": [0, 5], "optimizer_steps": 500, "lr": 0.01,
            "note": "plain run, mean training loss per 50 iterations: dropout net 0.63, 0.66, 0.64, 0.66, ... "
                    "0.64 (flat at its init loss for all 500); the other net 0.35 -> 0.047 -> 0.03. Still two "
                    "optimizer.step() calls per iteration, one step as the contract counts them -> 500 (was "
                    "1000).",
        },
    },
]
