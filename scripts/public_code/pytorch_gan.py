"""eriklindernoren/PyTorch-GAN: the MLP-sized MNIST scripts that run in well under a minute on one CPU thread:
implementations/gan/gan.py (MLP G and D, BCELoss, Adam 2e-4: healthy and 7 one-line bugs), wgan/wgan.py (MLP
critic with weight clipping, RMSprop 5e-5, G every 5th batch: healthy), aae/aae.py (adversarial autoencoder: MLP
encoder/decoder trained on 0.999 L1 reconstruction + 0.001 adversarial, a D on the 10-d code: healthy and 3 bugs)
and cgan/cgan.py (label-conditioned MLP G and D, MSELoss: healthy). All: batch 64, shuffled, unseeded (numpy noise,
torch init, shuffle), one G and one D optimizer; each prints `[D loss: ...] [G loss: ...]` at every batch (wgan: at
every 5th, when G steps). Shortened through their own flags (`--n_epochs 2`) on a synthetic training set of 16000
digits (250 batches an epoch: 500 iterations; cgan 9600: 300). One iteration = one optimizer step (D and G stepped
in one iteration are one step; wgan's D steps at every batch, its G at every 5th).

They read MNIST through torchvision (`datasets.MNIST("../../data/mnist", download=True)` from
implementations/<name>/): the data maker writes the four raw idx files under `<work>/data/mnist/MNIST/raw/` with
`make_mnist` of pytorch_examples.py (seven-segment glyphs, fixed seed), so torchvision finds them and downloads
nothing (the plain runs for the labels ran under `unshare -rn`, with no network, and passed). Like
pytorch_examples.py the module needs an interpreter with torchvision and offers no case without it. The mirror
lacks some asset blobs (assets/cluster_gan.gif): ARCHIVE_PATHS limits the export to the four scripts' folders.

A GAN's losses are a game's payoff and are not expected to fall: the healthy labels say that both losses stay in
a band (gan, cgan), that the critic's estimate rises and shrinks back as G catches up (wgan), or that the
reconstruction falls (aae). Every label comes from 2 traced draws (the printed losses of every batch, and each
optimizer's gradient norm before and parameter norm after its step, recorded by a runpy wrapper outside the
project, not neuraldbg) plus the harness's own --plain draw where the note quotes it; each held on every draw.

Tried and left out: dcgan, lsgan, acgan (conv G/D: ~1 s an iteration on one thread; 300 iterations is over
the time limit, and dcgan as published already showed D winning in pytorch_examples' note); gan.py with
BCEWithLogitsLoss behind D's Sigmoid (double sigmoid: D 0.60-0.69, G 0.47-0.69, a band that looks like a healthy
game: not visibly failing); gan.py Adam lr 100x (0.02: D 25-86, G 26-44 swinging; kept the 1000x case instead, one
lr case per script); wgan without weight clipping (critic -184 and G -590 against -8.7 and -18 clipped, but the
same rise-and-shrink shape: not a visible failure in 500 iterations); wgan RMSprop lr 0.05 (the clipping holds
D; the losses swing between -6.6 and +14.9 but show no clear failure); aae Adam lr 100x (reconstruction still
falls to 0.106, as healthy; only D swings); aae with the decoder fed `encoded_imgs.detach()` (reconstruction
0.196 at the end, still falling slowly: not a clean failure); cgan with D's weight_decay=1 (D 0.25 -> 0.39, G
0.47 -> 0.77: a drift, not a clear failure)."""
import importlib.util
from pathlib import Path

REPO = "eriklindernoren/PyTorch-GAN"
COMMIT = "36d3c77e5ff20ebe0aeefd322326a134a279b93e"
# the mirror lacks some blobs outside implementations/ (assets/*.gif): export only the scripts used
ARCHIVE_PATHS = ["implementations/gan", "implementations/wgan", "implementations/aae", "implementations/cgan"]

GAN = "implementations/gan/gan.py"
WGAN = "implementations/wgan/wgan.py"
AAE = "implementations/aae/aae.py"
CGAN = "implementations/cgan/cgan.py"


def _make_mnist():
    """make_mnist of pytorch_examples.py (the same synthetic digits), loaded from its file."""
    spec = importlib.util.spec_from_file_location("_pe_for_pgan", Path(__file__).with_name("pytorch_examples.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_mnist


def mnist_data(n_train):
    def make(work):
        _make_mnist()(work / "data" / "mnist", n_train, 64)
    make.__name__ = f"mnist_{n_train}"
    return make


DATA = mnist_data(16000)   # 250 batches of 64 an epoch; --n_epochs 2: 500 iterations
CDATA = mnist_data(9600)   # cgan: 150 batches an epoch; --n_epochs 2: 300 iterations
ARGS = ["--n_epochs", "2"]
LR_LINE = 'parser.add_argument("--lr", type=float, default=0.0002, help="adam: learning rate")'


def case(name, script, label, patch=None, data=DATA, timeout=240):
    return {"name": name, "script": script, "args": ARGS, "cwd": script.rsplit("/", 1)[0], "data": data,
            "env": {}, "patch": patch, "timeout": timeout,
            "label": dict({"seeded": False, "origins": None, "requires": ["torchvision"]}, **label)}


CASES = [
    case("pgan_gan_healthy", GAN, {
        "healthy": True, "kinds": [],
        "root": "as published: MLP G (100-128-256-512-1024-784, BatchNorm, LeakyReLU, Tanh) and D (784-512-256-1, "
                "Sigmoid), BCELoss, Adam lr 2e-4 betas (0.5, 0.999) for both",
        "steps": None, "optimizer_steps": 500,
        "note": "250 batches x 2 epochs, one G and one D step each. 3 draws: D 0.67 (step 0) -> 0.40 (10) then "
                "50-step means 0.43-0.51; G 0.69 -> 0.62 (20) then means 0.63-1.14, drifting up slowly as D "
                "sharpens (D 0.463/0.493/0.440/0.508/0.426/0.504/0.493/0.447/0.441/0.432, G "
                "0.63/0.77/0.96/0.85/0.99/0.96/0.97/1.14/1.12/1.14 per 50 steps); two 1000-step draws stay in "
                "the same band (D 0.40-0.49, G up to 1.47 and back to 1.3); gradient norms G 0.05 -> 3, D 1 -> "
                "2-5, parameter norms +5%; exit 0, ~20 s. Harness --plain draw: D 0.31-0.44, G 1.0-1.8 at batches "
                "247-249, exit 0, 30 s (2 cores shared).",
    }),
    case("pgan_gan_adam_lr1000x", GAN, patch={
        "file": GAN, "old": LR_LINE,
        "new": 'parser.add_argument("--lr", type=float, default=0.2, help="adam: learning rate")',
        "why": "learning rate 1000x too large (Adam lr 0.2 instead of 2e-4, the default of --lr)"}, label={
        "healthy": False,
        "kinds": ["saturated_activation", "vanishing_gradient", "no_gradient", "unchanged_weights",
                  "loss_plateau", "loss_divergence"],
        "root": "Adam lr 0.2: the first step moves every weight by ~0.2 (G parameter norm 52 -> 250, D 16 -> 147), "
                "D's Sigmoid saturates at exactly 1.0 on every input from step 1, so every gradient of G and D is "
                "exactly 0 and both models freeze (parameter norms constant from step ~50): D loss 50 (BCELoss's "
                "clamp of log 0 at -100, halved), G loss 0, to the end",
        "steps": [0, 2], "optimizer_steps": 500, "lr": 0.2, "mention": r"learning rate|\blr\b",
        "note": "2 traced draws, both: D 0.649 / 0.703 (step 0) -> 50.000000 from step 1 to 499; G 0.676 / 0.678 "
                "-> 0.000000 from step 1 (mean 0.0135 over the first 50 steps); gradient norm of G 0.055 (step 0) "
                "then 0.0 at every sampled step, of D 1.1 then 0.0; parameter norms G 52 -> 250 -> 363 -> 492.1 "
                "(step 10) and 492.1 to the end, D 16 -> 147 -> 216 -> 293.7 and constant; exit 0. D loss 50 = "
                "(0 + 100) / 2: D(real) = D(fake) = 1.0 in float32. Harness --plain draw: D 50.000000, G 0.000000 at "
                "the end.",
    }),
    case("pgan_gan_no_zero_grad_D", GAN, patch={
        "file": GAN, "old": "        optimizer_D.zero_grad()\n", "new": "",
        "why": "optimizer_D.zero_grad() left out: D's .grad sums every earlier step's gradient, including the "
               "gradient that G's loss (D(G(z)) -> 'real') leaves on D's parameters each iteration"}, label={
        "healthy": False,
        "kinds": ["loop_misuse", "loss_divergence", "unstable_loss", "exploding_gradient"],
        "root": "D's gradients are never zeroed: each D step applies the sum of all earlier D gradients plus the "
                "'call fakes real' gradient G's backward leaves on D, so D's loss climbs from 0.4 to 3-77 while "
                "G's falls towards 0 (D rates G's samples real); D's .grad norm grows 1.2 -> 1570, its weights "
                "16 -> 56-60",
        "steps": [0, 50], "optimizer_steps": 500, "lr": 0.0002, "mention": r"zero_grad|accumulat",
        "note": "2 traced draws: D 0.69 (step 0) -> 0.40 (5) -> 1.33 (20), 50-step means 0.84, 0.91, 1.02, 1.13, "
                "1.17, 4.97, 4.42, 3.02, 12.4, 27.8 (last 26.6); and 0.84 ... 1.92, 2.78, 1.17, 1.60, 2.69, 3.11 "
                "(healthy 0.43-0.51); G 0.72 -> 0.076 (20), means 0.35 -> 0.025 / 0.34 -> 0.099. D .grad norm 1.4 "
                "(step 0) -> 43 (50) -> 73-81 (100) -> 535 (300) -> 1560 (499); the gradient of one iteration "
                "(the change of .grad between D's steps) 1 -> 12-34 at steps 100-499; D parameter norm 16 -> 56-60 "
                "(healthy 17.5); exit 0. Harness --plain draw: D 77.0, 68.6, 69.0, G 0.04-1.5 at batches 247-249.",
    }),
    case("pgan_gan_no_zero_grad_G", GAN, patch={
        "file": GAN, "old": "        optimizer_G.zero_grad()\n", "new": "",
        "why": "optimizer_G.zero_grad() left out: G's .grad sums every earlier step's gradient"}, label={
        "healthy": False,
        "kinds": ["loop_misuse", "loss_divergence", "exploding_gradient", "saturated_activation",
                  "unstable_loss"],
        "root": "G's gradients are never zeroed: each G step applies the sum of all its earlier gradients, G "
                "overshoots and D wins outright: D's loss falls to ~0.001, G's climbs from 0.7 to 8-28 (its .grad "
                "norm 0.05 -> 1000-1400, its weights 52 -> 108)",
        "steps": [0, 100], "optimizer_steps": 500, "lr": 0.0002, "mention": r"zero_grad|accumulat",
        "note": "2 traced draws: D 0.72 -> 0.40 (10) -> 0.11 (50) -> 0.03 (100) -> 0.01 (200) -> 0.0008-0.004, "
                "50-step means 0.32, 0.20, 0.020, 0.028, 0.0065, 0.0027, 0.0021, 0.0014, 0.019, 0.0019; G 0.67 -> "
                "1.74 (50) -> 2.8 (100) -> 4.6 (200) -> 9.2 (300) -> 19.4 (499), means 0.97, 1.27, 3.8, 3.6, 4.8, "
                "6.9, 7.5, 7.3, 8.7, 23.8; second draw G 0.99 ... 7.9, 11.8 (28.1 at 499), D ending with a swing "
                "to 7.65 at 499 (healthy: D 0.43-0.51, G 0.63-1.14). G .grad norm 0.05 (step 0) -> 31 (50) -> 70-80 "
                "(100) -> 500-600 (300) -> 1060-1430 (499), the gradient of one iteration 0.06 -> 2-3 (50-100) -> "
                "17 (300) -> 50 (499); G parameter norm 52 -> 108 (healthy 54.8); exit 0. Harness --plain draw: D "
                "0.0003-0.001, G 9.6-10.5 at batches 247-249.",
    }),
    case("pgan_gan_optimizers_swapped", GAN, patch={
        "file": GAN, "old": "optimizer_G = torch.optim.Adam(generator.parameters(),",
        "new": "optimizer_G = torch.optim.Adam(discriminator.parameters(),",
        "why": "copy-paste slip: the generator's optimizer is built over the discriminator's parameters, so G is "
               "in no optimizer and D is stepped by both losses"}, label={
        "healthy": False, "kinds": ["unchanged_weights", "loss_plateau"],
        "root": "G's parameters get gradients but are in no optimizer: G keeps its random init; D is stepped by "
                "G's loss ('call fakes real') and by its own, so it ends at chance against an untrained G (D loss "
                "-> 0.69-0.72 = ln 2 and above, G loss -> 0.29-0.30)",
        "steps": [0, 5], "optimizer_steps": 500, "lr": 0.0002,
        "note": "2 traced draws: D 0.67 (step 0) -> 0.42 (10) -> 0.64-0.62 (50) -> 0.69 (100) -> 0.706-0.718 / "
                "0.684-0.689 (200-499), 50-step means 0.54, 0.67, 0.70, 0.71, 0.71, 0.71, 0.72, 0.72, 0.72, 0.72 "
                "and 0.53, 0.65, 0.67, 0.68, 0.69 ... 0.692: flat at ln 2 or above from step ~150 (healthy "
                "0.43-0.51); G 0.68 -> 0.35 (50) -> 0.287 / 0.304 (end). No optimizer holds G's parameters (traced: "
                "both optimizers hold D's, parameter norm 16 -> 26); exit 0. Harness --plain draw: D 0.731-0.737, G "
                "0.275-0.279 at batches 247-249.",
    }),
    case("pgan_gan_generator_detached", GAN, patch={
        "file": GAN, "old": "        gen_imgs = generator(z)\n", "new": "        gen_imgs = generator(z).detach()\n",
        "why": "a .detach() on the generator's output in the G step (meant for the D step only): G's loss no longer "
               "reaches G"}, label={
        "healthy": False, "kinds": ["no_gradient", "unchanged_weights", "loss_divergence"],
        "root": "G gets no gradient (its output is detached before D scores it), so G never changes; D learns to "
                "reject G's fixed noise: D loss -> 0.0002, G loss climbs from 0.68 to ~8 without levelling off",
        "steps": [0, 2], "optimizer_steps": 500, "lr": 0.0002,
        "note": "2 traced draws: D 0.69 / 0.72 (step 0) -> 0.36 (10) -> 0.11 (50) -> 0.008-0.010 (100) -> 0.0013 "
                "(200) -> 0.0002 (499); G 0.684 / 0.678 -> 0.70 (10) -> 1.55-1.65 (50) -> 4.0-4.1 (100) -> 5.9-6.0 "
                "(200) -> 6.8-6.9 (300) -> 7.9-8.0 (499), 50-step means 0.89, 2.87, 4.59, 5.51, 6.12, 6.58, 6.96, "
                "7.27, 7.53, 7.76 (healthy G 0.63-1.14); every parameter of G has .grad None at every step, G's "
                "parameter norm 51.91 from step 0 to 499; exit 0. Harness --plain draw: D 0.00019, G 7.91-7.93 at "
                "batches 247-249.",
    }),
    case("pgan_gan_g_loss_fake_target", GAN, patch={
        "file": GAN, "old": "g_loss = adversarial_loss(discriminator(gen_imgs), valid)",
        "new": "g_loss = adversarial_loss(discriminator(gen_imgs), fake)",
        "why": "the generator's loss uses the `fake` target instead of `valid`: G is trained to make D reject its "
               "samples, so G and D cooperate"}, label={
        "healthy": False, "kinds": ["loss_misuse", "vanishing_gradient", "saturated_activation"],
        "root": "G's loss targets 'fake': G helps D instead of fooling it; both losses collapse to ~1e-5 (an "
                "adversarial game cannot have both near 0), D's Sigmoid saturates (D(G(z)) ~ 1e-5, D(real) ~ 1) "
                "and every gradient fades (G 0.055 -> 6e-5, D 1.1 -> 2e-4)",
        "steps": [0, 50], "optimizer_steps": 500, "lr": 0.0002,
        "note": "2 traced draws: D 0.69 -> 0.31-0.32 (10) -> 0.05 (20) -> 0.0007 (50) -> 0.0002 (100) -> 5e-5 "
                "(200) -> 8e-6 / 1e-5 (499); G 0.72 / 0.68 -> 0.10 (20) -> 0.001 (50) -> 0.0002 (100) -> 6e-6 / "
                "7e-6 (499): both fall together, 50-step means of G 0.23, 0.0006, 0.00018 ... 1.25e-5 (healthy "
                "G 0.63-1.14, D 0.43-0.51). Gradient norm G 0.055 (step 0) -> 0.13 (10) -> 0.0053 (50) -> 6.5e-5 "
                "(499), D 1.1 -> 0.01 (50) -> 0.0002 (499); exit 0. Harness --plain draw: D 7e-6 to 1.2e-5, G 7e-6 "
                "to 1.6e-5 at batches 247-249.",
    }),
    case("pgan_gan_d_weight_decay1", GAN, patch={
        "file": GAN,
        "old": "optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))",
        "new": "optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2), "
               "weight_decay=1)",
        "why": "weight_decay=1 on D's optimizer (meant 1e-4 or so): the L2 pull outweighs D's data gradient"}, label={
        "healthy": False, "kinds": ["loss_plateau", "vanishing_gradient"],
        "root": "Adam weight_decay=1 on D drives D's weights to zero (norm 16 -> 0.08): D outputs 0.5 for every "
                "input, both losses sit at exactly ln 2 = 0.693147 and the gradient that reaches G fades to 3e-7 "
                "(G gets no signal)",
        "steps": [0, 300], "optimizer_steps": 500, "lr": 0.0002, "mention": r"weight.?decay",
        "note": "2 traced draws: D 0.70 (step 0) -> 0.67 (10-100) -> 0.690 (200) -> 0.693147 printed from step "
                "~250 to 499 in both (50-step means 0.693, 0.676/0.679, 0.682, 0.689, 0.692, 0.693, ...); G 0.68 "
                "-> 0.61-0.62 (20-50) -> 0.68 (200) -> 0.693 / 0.689 (499) (healthy D 0.43-0.51, G 0.63-1.14). D "
                "parameter norm 15.9 -> 10.6 (50) -> 6.9 (100) -> 0.91 (300) -> 0.084 (499), D gradient 1.1-1.2 -> "
                "0.38 (100) -> 0.02 (300) -> 0.0007-0.002 (499); G gradient 0.05 -> 0.014 (100) -> 0.00016 (300) "
                "-> 3e-7 (499); exit 0. Harness --plain draw: D 0.693147, G 0.69325 at batches 247-249.",
    }),
    case("pgan_wgan_healthy", WGAN, {
        "healthy": True, "kinds": [],
        "root": "as published: WGAN with the gan.py MLPs (critic without Sigmoid), D's weights clipped to +-0.01 "
                "after every D step, RMSprop lr 5e-5, G stepped every 5th batch (n_critic 5)",
        "steps": None, "optimizer_steps": 500,
        "note": "500 batches: 500 critic steps, 100 G steps, the losses printed at G's steps. 2 draws: critic loss "
                "(-W estimate) -0.06 / 0.14 (step 0) -> -4.4 / -4.6 (50) -> -8.4 (100) -> -3.4 / -2.8 (250) -> "
                "-1.3 / -1.5 (495), per 50 batches -1.63, -6.48, -8.45, -6.88, -4.39, -2.98, -2.51, -2.25, -1.83, "
                "-1.36 (and -1.65 ... -1.53): rises as the critic learns, then shrinks as G catches up; G -0.01 "
                "-> -17 (250) -> -12.5 / -13.4 (495), bounded by the clipping. The first RMSprop step is cut back "
                "by the clip (D parameter norm 16 -> 6.6, then 5.6-6.5); exit 0, ~20 s. Harness --plain draw: D "
                "-1.34 to -1.38, G -13.0 to -13.3 at batches 235-245.",
    }),
    case("pgan_aae_healthy", AAE, {
        "healthy": True, "kinds": [],
        "root": "as published: adversarial autoencoder, MLP encoder (1024-512-512 -> mu, logvar of a 10-d code, "
                "reparameterised) and decoder (10-512-512-1024, Tanh), G loss 0.001 BCE(D(code), real) + 0.999 "
                "L1(reconstruction), D (10-512-256-1, Sigmoid) tells N(0, 1) samples from codes; Adam 2e-4",
        "steps": None, "optimizer_steps": 500,
        "note": "img_size 32 (the default: the 28x28 digits resized). 2 draws: G loss 0.83-0.84 (step 0) -> 0.59 "
                "(10) -> 0.18-0.19 (50) -> 0.14 (100) -> 0.12 (200) -> 0.105 (300) -> 0.097-0.103 (499), 50-step "
                "means 0.40, 0.157, 0.137, 0.125, 0.117, 0.112, 0.107, 0.103, 0.100, 0.098: falls throughout; D "
                "0.69 -> 0.07-0.08 (100) -> back to 0.51-0.54 (from step ~300) as the codes come to match the "
                "prior; exit 0, ~25 s. Harness --plain draw: G 0.093-0.095, D 0.50-0.57 at batches 247-249, 38 s (2 "
                "cores shared).",
    }),
    case("pgan_aae_adam_lr1000x", AAE, patch={
        "file": AAE, "old": LR_LINE,
        "new": 'parser.add_argument("--lr", type=float, default=0.2, help="adam: learning rate")',
        "why": "learning rate 1000x too large (Adam lr 0.2 instead of 2e-4, the default of --lr)"}, label={
        "healthy": False, "kinds": ["non_finite", "loss_divergence", "exploding_gradient"],
        "root": "Adam lr 0.2: the first steps move every weight by ~0.2 (encoder/decoder parameter norm 45 -> 256 "
                "-> 374, D 16 -> 76 -> 107), D's loss jumps to 40-43 at step 1 and at step 2 D's output is NaN: "
                "BCELoss raises 'all elements of input should be between 0 and 1' and the script dies",
        "steps": [0, 3], "lr": 0.2, "mention": r"learning rate|\blr\b", "exit": 1,
        "note": "2 traced draws, both: D 0.69 / 0.70 (step 0) -> 42.7 / 40.0 (step 1), G 0.85 / 0.83 -> 0.35 / "
                "0.41; then the third iteration's G loss raises RuntimeError in binary_cross_entropy (D's Sigmoid "
                "output NaN on 1 of the 64 codes, checked by wrapping F.binary_cross_entropy), exit 1 after 2 "
                "optimizer steps of each model (~4 s). D gradient norm 0.30 -> 4.6-5.9 at step 1. Seven more plain "
                "draws: exit 1 in all, after 2 (5 draws), 3 or 4 optimizer steps (D 27-39 at the last printed "
                "step). optimizer_steps is left out of the label: the count changes with the draw, and the script "
                "prints a 0-based batch index, which a from_output regex cannot turn into a count. Harness --plain "
                "draw: D 0.70, 39.8, 52.5, then the RuntimeError: exit 1 after 3 steps.",
    }),
    case("pgan_aae_no_zero_grad_G", AAE, patch={
        "file": AAE, "old": "        optimizer_G.zero_grad()\n", "new": "",
        "why": "optimizer_G.zero_grad() left out: the encoder's and decoder's .grad sum every earlier step's "
               "gradient"}, label={
        "healthy": False, "kinds": ["loop_misuse", "loss_plateau"],
        "root": "the autoencoder's gradients are never zeroed: each step applies the sum of all earlier gradients, "
                "the weights grow (norm 45 -> 130) and the reconstruction stops improving at ~0.17 by step 60, "
                "then creeps back up to 0.19 (healthy: 0.097 and still falling)",
        "steps": [0, 100], "optimizer_steps": 500, "lr": 0.0002, "mention": r"zero_grad|accumulat",
        "note": "2 traced draws: G 0.85 / 0.84 (step 0) -> 0.54 (10) -> 0.18 (50) -> 0.16-0.17 (100) -> 0.18 "
                "(200) -> 0.19 (300) -> 0.18-0.20 (499), 50-step means 0.34, 0.169, 0.172, 0.174, 0.176, 0.177, "
                "0.177, 0.181, 0.180, 0.179 and 0.34, 0.168, 0.175, 0.177, 0.181, 0.182, 0.183, 0.186, 0.184, 0.187 "
                "(healthy 0.40, 0.157, 0.137 ... 0.098); D 0.69 -> 0.03-0.13. Encoder/decoder .grad norm 0.18 "
                "(step 0) -> 3.5 (50) -> 3.8 (499), while one iteration's gradient falls 0.18 -> 0.05-0.09 (not "
                "an explosion); parameter norm 45.5 -> 53 (100) -> 87 (300) -> 130 (499) (healthy 46.9); exit 0. "
                "Harness --plain draw: G 0.18-0.19 at batches 247-249.",
    }),
    case("pgan_aae_weight_decay1", AAE, patch={
        "file": AAE,
        "old": "itertools.chain(encoder.parameters(), decoder.parameters()), lr=opt.lr, betas=(opt.b1, opt.b2)",
        "new": "itertools.chain(encoder.parameters(), decoder.parameters()), lr=opt.lr, betas=(opt.b1, opt.b2), "
               "weight_decay=1",
        "why": "weight_decay=1 on the autoencoder's optimizer (meant 1e-4 or so): the L2 pull outweighs the "
               "reconstruction gradient"}, label={
        "healthy": False, "kinds": ["loss_plateau", "vanishing_gradient"],
        "root": "Adam weight_decay=1 on the encoder and decoder holds their weights down (norm 45 -> 30): the "
                "reconstruction loss stays at ~0.81 from the start (healthy: 0.84 -> 0.097), and the encoder's "
                "gradient fades 65x (its code stops carrying the image)",
        "steps": [0, 150], "optimizer_steps": 500, "lr": 0.0002, "mention": r"weight.?decay",
        "note": "2 traced draws: G 0.85 (step 0) -> 0.84 (10-50) -> 0.82 (100) -> 0.81-0.82 (200-499), 50-step "
                "means 0.837, 0.826, 0.818, 0.812, 0.807, 0.806, 0.806, 0.807, 0.809, 0.809 (second: 0.838, 0.827, "
                "0.819, 0.814, 0.809, 0.807, 0.806, 0.808, 0.808, 0.810); "
                "D 0.69-0.70 throughout (the code never separates from the prior); encoder+decoder gradient norm "
                "0.18 throughout, parameter norm 45.4 -> 39.7 (50) -> 31.9 (300) -> 30.1 (499); "
                "exit 0. Harness --plain draw: G 0.805-0.815, D 0.695-0.699 at batches 247-249. Corrected after the "
                "neuraldbg run (which named vanishing_gradient in the encoder): the first note read one gradient "
                "norm over encoder and decoder together, dominated by the decoder, and said 'not vanishing'; a "
                "per-model trace of a plain draw shows the encoder's gradient norm 0.054 (step 0) -> 0.035 (100) -> "
                "0.0051 (250) -> 0.0017 (300) -> 0.0008 (499) (healthy draw: 0.055 -> 0.11) while the decoder's "
                "stays 0.17-0.18, so vanishing_gradient was added to the accepted kinds.",
    }),
    case("pgan_cgan_healthy", CGAN, {
        "healthy": True, "kinds": [],
        "root": "as published: conditional GAN, MLP G (noise + label embedding, as gan.py's G, 32x32 output) and D "
                "(image + label embedding, 3x512 with Dropout 0.4, no Sigmoid), MSELoss (least squares), Adam 2e-4",
        "steps": None, "optimizer_steps": 300,
        "note": "img_size 32 (the default). 2 draws: D 0.52 / 0.59 (step 0) -> 0.011-0.013 (10: D wins at "
                "first) -> back to 0.07-0.19 from step ~60, 50-step means 0.068, 0.146, 0.178, 0.165, 0.133, 0.121, "
                "0.121, 0.095, 0.120, 0.129 (500-step draw) and 30-step means 0.057, 0.10, 0.19, 0.18, 0.13, 0.17, "
                "0.18, 0.13, 0.14, 0.14 (300-step draw); G 1.0 -> 0.5-0.8 (means 0.77, 0.56, 0.57, 0.51, 0.56, "
                "0.59, 0.62, 0.67, 0.65, 0.67 and 0.84 ... 0.57): both in a band; gradient norms G 0.08 -> 0.7-1.8, "
                "D 2.9 -> 0.6-1.1; exit 0, ~25 s for 300 iterations. Harness --plain draw: D 0.09-0.10, G 0.54-0.63 "
                "at batches 147-149, 41 s (2 cores shared).",
    }, data=CDATA),
]

# every script imports torchvision: where the interpreter lacks it, the module offers no case
if importlib.util.find_spec("torchvision") is None:
    CASES = []
