"""jcjohnson/pytorch-examples: Justin Johnson's two-layer-network examples (the ones the official "Learning PyTorch
with Examples" tutorial grew from): a 1000-100-10 ReLU net fitted to 64 random inputs/targets with MSE(sum) for 500
steps, written with raw autograd tensors, nn.Sequential + manual updates, nn.Module + SGD, nn.Sequential + Adam, and
a dynamic-depth net that reuses its middle layer 0-3 times per forward (SGD momentum: its loss jumps by design).
The scripts make their own data (torch.randn: 64 samples, 10 random targets each, which a 100-unit hidden layer can
memorise) and take no flags. They are unseeded: the figures in the notes come from 2-3 plain runs each and vary a
little from run to run; every label holds in all of them."""
REPO = "jcjohnson/pytorch-examples"
COMMIT = "0003fcdc606a79951e53bf8f46f8574fa4739f23"

STEPS = 500  # `for t in range(500)`: one update per iteration in every script

CASES = [
    {
        "name": "jcj_optim_adam_healthy",
        "script": "nn/two_layer_net_optim.py",
        "args": [], "data": None, "patch": None, "timeout": 120,
        "label": {
            "healthy": True, "kinds": [], "seeded": False, "root": "as published: nn.Sequential + Adam lr 1e-4, MSE(sum)",
            "origins": None, "steps": None, "optimizer_steps": STEPS,
            "note": "plain run: loss 683 -> 209 (step 50) -> 0.56 (200) -> 0.0026 (300) -> 3.8e-8 (499).",
        },
    },
    {
        "name": "jcj_module_sgd_healthy",
        "script": "nn/two_layer_net_module.py",
        "args": [], "data": None, "patch": None, "timeout": 120,
        "label": {
            "healthy": True, "kinds": [], "seeded": False, "root": "as published: custom nn.Module + SGD lr 1e-4, MSE(sum)",
            "origins": None, "steps": None, "optimizer_steps": STEPS,
            "note": "plain run: loss 670 -> 30.6 (step 50) -> 0.045 (200) -> 1.9e-5 (499).",
        },
    },
    {
        "name": "jcj_dynamic_net_healthy",
        "script": "nn/dynamic_net.py",
        "args": [], "data": None, "patch": None, "timeout": 120,
        "label": {
            "healthy": True, "kinds": [], "seeded": False,
            "root": "as published: 0-3 reused middle layers drawn per forward, SGD lr 1e-4 momentum 0.9; the loss "
                    "jumps between consecutive steps by design (the depth changes)",
            "origins": None, "steps": None, "optimizer_steps": STEPS,
            "note": "3 plain runs: loss 606-682 -> ~60-95 (step 50) -> 0.15-0.8 (200) -> last 50 steps mean "
                    "0.27-0.34, single steps up to 1.2-3.0 (a depth the net has seen less).",
        },
    },
    {
        "name": "jcj_autograd_tensors_healthy",
        "script": "autograd/two_layer_net_autograd.py",
        "args": [], "data": None, "patch": None, "timeout": 120,
        "label": {
            "healthy": True, "kinds": [], "seeded": False,
            "root": "as published: raw tensors w1, w2 (randn init, no nn.Module, no optimizer), manual update "
                    "lr 1e-6 under no_grad, grads zeroed by hand",
            "origins": None, "steps": None, "optimizer_steps": STEPS,
            "note": "plain run: loss 2.2e7 (unscaled randn weights) -> 8.6e3 (step 50) -> 0.29 (200) -> 1.6e-5 "
                    "(499). 500 manual updates (no optimizer).",
        },
    },
    {
        "name": "jcj_module_lr100x_diverges",
        "script": "nn/two_layer_net_module.py",
        "args": [], "data": None, "timeout": 120,
        "patch": {"file": "nn/two_layer_net_module.py",
                  "old": "optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)",
                  "new": "optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)",
                  "why": "learning rate 100x too large for a summed (not averaged) MSE"},
        "label": {
            "healthy": False, "seeded": False, "kinds": ["loss_divergence", "exploding_gradient", "non_finite"],
            "root": "SGD lr 1e-2 (published 1e-4) on MSE(reduction='sum'): every step overshoots",
            "origins": None, "steps": [0, 4], "optimizer_steps": STEPS, "lr": 1e-2,
            "note": "plain run: loss 712, 2.8e4, 9.6e9, 1.5e27 (step 3), NaN from step 5 to the end; exit 0.",
        },
    },
    {
        "name": "jcj_manual_update_sign_flipped",
        "script": "nn/two_layer_net_nn.py",
        "args": [], "data": None, "timeout": 120,
        "patch": {"file": "nn/two_layer_net_nn.py",
                  "old": "param.data -= learning_rate * param.grad",
                  "new": "param.data += learning_rate * param.grad",
                  "why": "the manual update's sign flipped: gradient ascent"},
        "label": {
            "healthy": False, "seeded": False, "kinds": ["loss_divergence", "exploding_gradient", "non_finite"],
            "root": "manual update `param.data += lr * grad`: gradient ascent, the loss grows geometrically",
            "origins": None, "steps": [0, 12], "optimizer_steps": STEPS, "lr": 1e-4,
            "note": "plain run: loss 671, 725, 784, 851 (step 3), 1017 (5), 2263 (10), NaN by step 20 and to the end "
                    "(500 manual updates, no optimizer); exit 0.",
        },
    },
    {
        "name": "jcj_adam_lr1000x_dead_relu",
        "script": "nn/two_layer_net_optim.py",
        "args": [], "data": None, "timeout": 120,
        "patch": {"file": "nn/two_layer_net_optim.py",
                  "old": "learning_rate = 1e-4\n",
                  "new": "learning_rate = 1e-1\n",
                  "why": "Adam learning rate 1000x too large"},
        "label": {
            "healthy": False, "seeded": False, "kinds": ["dead_activation", "loss_plateau"],
            "root": "Adam lr 0.1 (published 1e-4): the first steps push the hidden ReLUs negative for every "
                    "sample; once all 100 are dead the output is the bias alone and the loss sits at the targets' "
                    "sum of squares",
            "origins": None, "steps": [0, 60], "optimizer_steps": STEPS, "lr": 0.1,
            "note": "3 plain runs: loss 676-696, spike to 1.7e5-3.6e5 at step 1, back to ~630 by step 10, then flat "
                    "585-660 to the end (last 50 steps constant in one run: 620.2). A side probe (ReLU hook, not "
                    "neuraldbg) in one run: units alive on any sample 100% at step 2, 82% at 5, 64% at 10, 11% at "
                    "100, 2% at 499.",
        },
    },
    {
        "name": "jcj_dynamic_optimizer_partial",
        "script": "nn/dynamic_net.py",
        "args": [], "data": None, "timeout": 120,
        "patch": {"file": "nn/dynamic_net.py",
                  "old": "optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)",
                  "new": "optimizer = torch.optim.SGD(model.output_linear.parameters(), lr=1e-4, momentum=0.9)",
                  "why": "optimizer built over the last layer's parameters only"},
        "label": {
            "healthy": False, "seeded": False, "kinds": ["unchanged_weights", "loss_plateau"],
            "root": "the optimizer holds only output_linear: input_linear and middle_linear get gradients but never "
                    "change, and the last layer alone cannot fit the features of 4 random depths",
            "origins": ["input_linear", "middle_linear"], "steps": [0, 10], "optimizer_steps": STEPS, "lr": 1e-4,
            "note": "3 plain runs: loss 532-655 at the start, still 130-650 step to step at the end (last 50 steps "
                    "mean 341-429; healthy script: 0.27-0.34).",
        },
    },
    {
        "name": "jcj_dynamic_detach_first_layer",
        "script": "nn/dynamic_net.py",
        "args": [], "data": None, "timeout": 120,
        "patch": {"file": "nn/dynamic_net.py",
                  "old": "h_relu = self.input_linear(x).clamp(min=0)",
                  "new": "h_relu = self.input_linear(x).clamp(min=0).detach()",
                  "why": "a .detach() cuts input_linear out of the graph"},
        "label": {
            "healthy": False, "seeded": False, "kinds": ["no_gradient", "unchanged_weights"],
            "root": "input_linear's output is detached: input_linear never gets a gradient (stays at its init); "
                    "the layers after it still learn, more slowly",
            "origins": ["input_linear"], "steps": [0, 10], "optimizer_steps": STEPS, "lr": 1e-4,
            "note": "3 plain runs: loss 592-648 -> last 50 steps mean 20-22, single steps up to 80-96 (healthy "
                    "script: 0.27-0.34, max 1.2-3.0).",
        },
    },
]
