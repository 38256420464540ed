"""hunkim/PyTorchZeroToAll (Sung Kim's "PyTorch Zero to All" lectures; taken in place of pytorch/tutorials, whose
snapshot is too large to mirror here): 05_linear_regression (nn.Linear(1, 1) on x = 1, 2, 3 -> 2x, MSE(sum), SGD lr
0.01, 500 steps), 06_logistic_regression (nn.Linear(1, 1) + sigmoid, BCELoss on 4 points, SGD lr 0.01, 1000 steps)
and 12_4_hello_rnn_emb (Embedding 10 + nn.RNN(10, 5) + Linear, "hihell" -> "ihello", CrossEntropyLoss, Adam lr
0.1, 100 steps). All make their data in the script and take no flags; 12_4 is seeded (torch.manual_seed(777)), 05
and 06 are not (the figures in their notes come from plain runs and vary a little; every label held). Left out:
07/08 (the shipped diabetes.csv: the 3-sigmoid-layer net sits at the class-prior loss 0.645, an ambiguous label),
12_2/12_3/13_3 (they index 0-d tensors, `loss.data[0]`, and crash on current torch), the MNIST ones (torchvision)."""
REPO = "hunkim/PyTorchZeroToAll"
COMMIT = "e5a260fac0b4ff1e2ec434fc6f0d962ac97fc289"

CASES = [
    {
        "name": "hunkim_linreg_healthy",
        "script": "05_linear_regression.py",
        "args": [], "cwd": ".", "data": None, "env": {}, "patch": None, "timeout": 120,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: nn.Linear(1, 1) fitted to y = 2x on 3 points, MSE(sum), SGD lr 0.01",
            "seeded": False, "origins": None, "steps": None, "optimizer_steps": 500,
            "note": "`for epoch in range(500)`, one step each. plain run: loss 20.0, 9.2, 4.3 (step 2) -> 0.23 "
                    "(50) -> 0.013 (250) -> 3.4e-4 (499); prediction for 4: 7.98.",
        },
    },
    {
        "name": "hunkim_linreg_lr10x_diverges",
        "script": "05_linear_regression.py",
        "args": [], "cwd": ".", "data": None, "env": {}, "timeout": 120,
        "patch": {"file": "05_linear_regression.py",
                  "old": "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)",
                  "new": "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
                  "why": "learning rate 10x too large for a summed MSE (curvature 2 * sum x^2 = 28: SGD is stable "
                         "only below lr 0.07)"},
        "label": {
            "healthy": False, "kinds": ["loss_divergence", "exploding_gradient", "non_finite"],
            "root": "SGD lr 0.1 on MSE(reduction='sum') over x = 1..3: every step overshoots by a factor ~1.8",
            "seeded": False, "origins": None, "steps": [0, 51], "optimizer_steps": 500, "lr": 0.1,
            "mention": r"learning rate|\blr\b",
            "note": "plain run: loss 47, 257, 1392 (step 2), 2.4e38 (step 50), inf/NaN from step 51 to 499; "
                    "prediction for 4: nan; exit 0.",
        },
    },
    {
        "name": "hunkim_logistic_healthy",
        "script": "06_logistic_regression.py",
        "args": [], "cwd": ".", "data": None, "env": {}, "patch": None, "timeout": 120,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: sigmoid(nn.Linear(1, 1)), BCELoss on 4 points (hours 1-4 -> fail, fail, pass, "
                    "pass), SGD lr 0.01; slow but steady",
            "seeded": False, "origins": None, "steps": None, "optimizer_steps": 1000,
            "note": "`for epoch in range(1000)`. plain run: loss 0.945 -> 0.663 (step 100) -> 0.619 (250) -> 0.562 "
                    "(500) -> 0.513 (750) -> 0.473 (999), still falling at the end (lr 0.01 is small, as the "
                    "lecture chose); predicts 7 hours -> 0.96.",
        },
    },
    {
        "name": "hunkim_logistic_weight_decay1",
        "script": "06_logistic_regression.py",
        "args": [], "cwd": ".", "data": None, "env": {}, "timeout": 120,
        "patch": {"file": "06_logistic_regression.py",
                  "old": "optimizer = optim.SGD(model.parameters(), lr=0.01)",
                  "new": "optimizer = optim.SGD(model.parameters(), lr=0.01, weight_decay=1)",
                  "why": "weight_decay=1 (meant 1e-4 or so): the L2 pull outweighs the data gradient"},
        "label": {
            "healthy": False, "kinds": ["loss_plateau", "unchanged_weights"],
            "root": "SGD weight_decay=1 holds the weight and bias near zero: the loss stops at 0.62 and the model "
                    "cannot separate the classes (1 hour -> 0.53, 'above 50%')",
            "seeded": False, "origins": None, "steps": [0, 300], "optimizer_steps": 1000, "lr": 0.01,
            "mention": r"weight.?decay",
            "note": "plain run: loss 0.891 -> 0.615 (step 100) -> 0.618 (250) -> 0.6195 (500) -> 0.6197 (750-999), "
                    "flat from ~step 100 (the published script: 0.47 at 999, still falling); predicts 1 hour -> "
                    "0.525 (wrong side), 7 hours -> 0.784.",
        },
    },
    {
        "name": "hunkim_hello_rnn_emb_healthy",
        "script": "12_4_hello_rnn_emb.py",
        "args": [], "cwd": ".", "data": None, "env": {}, "patch": None, "timeout": 120,
        "label": {
            "healthy": True, "kinds": [],
            "root": "as published: Embedding + nn.RNN(10, 5) + Linear learning 'hihell' -> 'ihello', Adam lr 0.1",
            "origins": None, "steps": None, "optimizer_steps": 100,
            "note": "`for epoch in range(100)`, seeded. plain run: loss 1.77, 1.40, 1.13 (step 2) -> 0.30 (10) -> "
                    "0.022 (50) -> 0.0070 (99); predicts 'ihello'.",
        },
    },
    {
        "name": "hunkim_hello_rnn_emb_loss_sign",
        "script": "12_4_hello_rnn_emb.py",
        "args": [], "cwd": ".", "data": None, "env": {}, "timeout": 120,
        "patch": {"file": "12_4_hello_rnn_emb.py",
                  "old": "    loss = criterion(outputs, labels)\n",
                  "new": "    loss = -criterion(outputs, labels)\n",
                  "why": "the loss's sign flipped: the optimizer maximises the cross-entropy"},
        "label": {
            "healthy": False, "kinds": ["loss_misuse", "loss_divergence"],
            "root": "minimising -CrossEntropy pushes the true class's probability to zero: the (negated) loss "
                    "falls without bound",
            "origins": None, "steps": [0, 5], "optimizer_steps": 100, "lr": 0.1,
            "note": "plain run (seeded): printed loss -1.77, -2.43, -3.05 (step 2), -9.9 (10), -23.9 (25), -47.8 "
                    "(50), -93.7 (99), falling linearly; predicts 'hihehh'.",
        },
    },
]
