"""karpathy/ng-video-lecture (the code of the "Let's build GPT" lecture): bigram.py, an nn.Embedding(65, 65)
bigram language model on characters, F.cross_entropy, AdamW lr 1e-2, batch 32 x block 8, 3000 iterations, an
estimate of the train/val loss (200 batches each, under no_grad) every 300, then 500 sampled characters. Seeded
(torch.manual_seed(1337)), no flags. Data: the repository's own input.txt (tiny Shakespeare, 1115394 characters,
part of the commit), which the script reads from its folder: nothing is written or downloaded.

Left out: gpt.py (6 layers x 6 heads, n_embd 384, block 256, batch 64, 5000 iterations, hard-coded: far over the
time limit on one CPU thread). Part of the small_repos set (see small_repos.py for vinhkhuc/PyTorch-Mini-Tutorials
and the devnag GAN left out).

Broken-variant candidates dropped: AdamW lr 1 (100x) (loss per tenth of the run 2.74-2.81 against 2.46-2.63 for
the published script: worse but not a clear failure; lr 10, 1000x, is kept); optimizer.zero_grad() removed (the
loss falls to 2.33 at step 633, then climbs back to 3.0-3.35 by the end: a real but milder failure, and the two
vinhkhuc no-zero_grad cases already cover the bug).

Figures in the notes: per-step losses recorded from outside the script by a runpy wrapper (not neuraldbg), and
the harness's own `--plain` run (the script's printed estimates). Labels decided from those before neuraldbg saw
the cases."""
REPO = "karpathy/ng-video-lecture"
COMMIT = "52201428ed7b46804849dea0b3ccf0de9df1a5c3"

BIGRAM = "bigram.py"


def case(name, label, patch=None):
    return {"name": name, "script": BIGRAM, "args": [], "cwd": ".", "data": None, "env": {}, "patch": patch,
            "timeout": 120, "label": dict({"seeded": True, "origins": None, "optimizer_steps": 3000}, **label)}


CASES = [
    case("ngvideo_bigram_healthy", {
        "healthy": True, "kinds": [],
        "root": "as published: Embedding(65, 65) bigram model, cross-entropy, AdamW lr 1e-2, 3000 iterations",
        "steps": None,
        "note": "Traced: loss 4.73 (step 0), 4.47 (10), 4.13 (50), 3.73 (100), 3.09 (200), 2.47 (500), 2.35 "
                "(1000), 2.38 (2000), 2.54 (2999); means per tenth 3.52, 2.63, 2.52, 2.49, then 2.46-2.47 (the "
                "bigram entropy of the text). "
                "Harness --plain: printed train/val 4.7305/4.7241 (step 0), 2.8110/2.8249 (300), 2.5434/2.5682 (600), "
                "2.4665/2.4921 (1500), 2.4738/2.4911 (2700); samples word-like text; exit 0, 7-11 s.",
    }),
    case("ngvideo_bigram_softmax_into_ce", {
        "healthy": False, "kinds": ["loss_misuse", "loss_plateau", "saturated_activation"],
        "root": "probabilities, not logits, go into F.cross_entropy: with 65 classes the loss stays near ln 65 = "
                "4.17 (floor -log(e / (e + 64)) = 3.19) and its gradient is ~65x smaller; the model ends at 3.93 "
                "and samples 'the the the'",
        "steps": [0, 500], "lr": 0.01, "mention": r"softmax",
        "note": "Traced: loss 4.18 (steps 0-10), 4.17 (20), 4.17 (50), 4.15 (100), 4.08 (200), 3.95 (500), 3.89 "
                "(1000), 3.89 (2000), 3.90 (2999); means per tenth 4.11, 3.96, then 3.93-3.94 (published: 2.46). "
                "Harness --plain: printed train/val 4.1761/4.1763 (step 0), 3.9981/3.9975 (300), 3.9446/3.9460 (600), "
                "3.9334/3.9341 (900), 3.9340/3.9311 (2700); samples 'the the the ...'; exit 0.",
    }, patch={
        "file": BIGRAM,
        "old": "loss = F.cross_entropy(logits, targets)",
        "new": "loss = F.cross_entropy(F.softmax(logits, dim=-1), targets)",
        "why": "softmax applied to the logits before F.cross_entropy (which applies log-softmax itself)"}),
    case("ngvideo_bigram_loss_sign_flipped", {
        "healthy": False, "kinds": ["loss_misuse", "loss_divergence"],
        "root": "(-loss).backward(): gradient ascent on the cross-entropy; AdamW pushes the true next characters' "
                "logits down every step, the cross-entropy grows without bound (4.7 -> 53)",
        "steps": [0, 200], "lr": 0.01,
        "note": "Traced (the negated loss): -4.73 (step 0), -4.93 (20), -5.23 (50), -5.96 (100), -7.47 (200), "
                "-12.5 (500), -23.5 (1000), -41.8 (2000), -53.6 (2999), falling steadily; samples random "
                "characters. "
                "Harness --plain: printed train/val 4.7305/4.7241 (step 0), 9.05/9.03 (300), 13.8/13.8 (600), "
                "27.7/27.5 (1200), 38.5/38.3 (1800), 50.3/50.1 (2700); samples random characters, then 'UUUU...'; "
                "exit 0.",
    }, patch={
        "file": BIGRAM,
        "old": "    loss.backward()\n",
        "new": "    (-loss).backward()\n",
        "why": "the loss's sign flipped in the backward pass: gradient ascent on the cross-entropy"}),
    case("ngvideo_bigram_lr1000x", {
        "healthy": False, "kinds": ["loss_divergence", "unstable_loss", "exploding_gradient", "loss_plateau"],
        "root": "AdamW lr 10 (published 1e-2): every step moves each touched logit by ~10, the loss jumps from "
                "4.7 to 13-14 in 4 steps and then bounces around 4.5, above the uniform guess (ln 65 = 4.17), for "
                "the whole run",
        "steps": [0, 5], "lr": 10, "mention": r"learning rate|\blr\b",
        "note": "Traced: loss 4.73 (step 0), 8.77 (1), 12.9 (2), 14.0 (4), 11.0 (6), 7.5 (14), 6.8 (20), 4.73 "
                "(50), 4.31 (100), 3.95 (500), 4.46 (1000), 3.93 (2000), 4.94 (2999); means per tenth 4.89, "
                "4.42, 4.53, 4.49, 4.48, 4.46, 4.47, 4.52, 4.50, 4.52 (published: 2.46); parameter norm 65 -> "
                "400-690. "
                "Harness --plain: printed train/val 4.7305/4.7241 (step 0), 4.5517/4.6387 (300), 4.6899/4.6861 (600), "
                "4.2931/4.4161 (900), 4.5659/4.6326 (1200), 4.4263/4.5104 (2700); exit 0.",
    }, patch={
        "file": BIGRAM,
        "old": "learning_rate = 1e-2",
        "new": "learning_rate = 10",
        "why": "learning rate 1000x too large (AdamW lr 10 instead of 1e-2)"}),
    case("ngvideo_bigram_targets_shuffled", {
        "healthy": False, "kinds": ["data_anomaly", "loss_plateau"],
        "root": "the targets taken from other rows of the batch than their inputs (ix shuffled for y only): a "
                "character no longer predicts its target, the model can only learn the character frequencies "
                "and the loss stops at the unigram entropy (~3.3) instead of 2.47",
        "steps": [0, 1000], "lr": 0.01,
        "note": "Traced: loss 4.74 (step 0), 4.59 (10), 4.28 (50), 4.05 (100), 3.79 (200), 3.68 (500), 3.24 "
                "(1000), 3.23 (2000), 3.44 (2999); means per tenth 3.94, 3.43, 3.35, then 3.31-3.33 (published: "
                "2.46); samples look like shuffled letters. "
                "Harness --plain (the printed estimates use the same shuffled targets): train/val 4.7002/4.7064 (step "
                "0), 3.5354/3.5615 (300), 3.3747/3.4104 (600), 3.3126/3.3665 (1200), 3.3091/3.3655 (2700); exit 0.",
    }, patch={
        "file": BIGRAM,
        "old": "y = torch.stack([data[i+1:i+block_size+1] for i in ix])",
        "new": "y = torch.stack([data[i+1:i+block_size+1] for i in ix[torch.randperm(batch_size)]])",
        "why": "the targets gathered with a shuffled copy of the batch indices: every row gets another row's "
               "next characters"}),
    case("ngvideo_bigram_weight_decay10", {
        "healthy": False, "kinds": ["loss_plateau", "unchanged_weights"],
        "root": "AdamW weight_decay=10 (default 0.01): lr x wd = 0.1 of every weight is removed each step, the "
                "table shrinks to norm ~4 (from 65) and the loss stays at 4.07, just under the uniform ln 65",
        "steps": [0, 100], "lr": 0.01, "mention": r"weight.?decay",
        "note": "Traced: loss 4.73 (step 0), 4.31 (5), 4.13 (10), 4.09 (20), 4.07 (50 ... 2999, within 0.02); "
                "means per tenth 4.08, then 4.067-4.068; parameter norm 58 (step 0) -> 4.1-4.2 (step 300 on) "
                "(published: loss 2.46, norm 65 -> 261); samples random characters. "
                "Harness --plain: printed train/val 4.7305/4.7241 (step 0), 4.0686/4.0691 (300), 4.0675/4.0683 (600) "
                "... 4.0678/4.0679 (2700); exit 0.",
    }, patch={
        "file": BIGRAM,
        "old": "optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)",
        "new": "optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=10)",
        "why": "weight_decay=10 in AdamW (meant 1e-1 or so): the decay outweighs the updates"}),
]
