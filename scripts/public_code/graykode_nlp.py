"""graykode/nlp-tutorial: the self-contained PyTorch scripts with tiny inline data that train well under a minute
on one CPU thread: 1-1 NNLM (3 sentences, predict the last word), 2-1 TextCNN (6 three-word sentences, 2 classes),
3-1 TextRNN (the NNLM task with an nn.RNN), 3-2 TextLSTM (10 four-letter words, predict the 4th letter),
4-1 Seq2Seq (6 word pairs, one-hot RNN encoder-decoder, loss summed over the pairs), 4-2 Seq2Seq(Attention) (one
German->English sentence, RNN decoder with dot attention) and 4-3 Bi-LSTM(Attention) (the TextCNN data, BiLSTM
with attention). All: full batch, CrossEntropyLoss, Adam lr 0.001, one optimizer step per epoch, no flags, no data
files. They are unseeded: the figures in the notes come from 2 traced draws each (every `loss.backward()` value and
every optimizer step recorded from outside the script by a runpy wrapper, not neuraldbg; gradient norms and tanh
saturation read the same way where a note quotes them) plus the harness's own `--plain` draw; each label held in
every draw. Left out: 1-2 Word2Vec (batch 2, the skip-gram targets are ambiguous: printed loss 2.11, 1.53, 2.07,
1.19, 1.90 at epochs 1000-5000, no clear fall), 3-3 Bi-LSTM (41 s plain, loss still 0.49 at 10000 epochs),
5-1 Transformer (as published its loss jumps 2.1 -> 4.6 -> 1.3-1.9 in 20 steps: not a clean healthy run) and
5-2 BERT (over 200 s on one thread). Broken-variant candidates dropped because their plain runs did not fail on
this tiny data: Adam lr 1 in NNLM (loss 0 by step 20), in TextLSTM (one draw 1e-4, one 0.37) and in
Seq2Seq(Attention) (one draw 0, one ~37); zero_grad() removed in TextRNN and in Seq2Seq(Attention) (loss 0).
matplotlib is imported by 4-2 and 4-3 (plt.show() under MPLBACKEND=Agg, which the harness sets, returns)."""
REPO = "graykode/nlp-tutorial"
COMMIT = "d05e31ec81d56d70c1db89b99ab07e948f7ebc11"
# only the PyTorch scripts used here (not archive/ or the notebooks)
ARCHIVE_PATHS = ["1-1.NNLM/NNLM.py", "2-1.TextCNN/TextCNN.py", "3-1.TextRNN/TextRNN.py", "3-2.TextLSTM/TextLSTM.py",
                 "4-1.Seq2Seq/Seq2Seq.py", "4-2.Seq2Seq(Attention)/Seq2Seq(Attention).py",
                 "4-3.Bi-LSTM(Attention)/Bi-LSTM(Attention).py"]

NNLM = "1-1.NNLM/NNLM.py"
CNN = "2-1.TextCNN/TextCNN.py"
RNN = "3-1.TextRNN/TextRNN.py"
LSTM = "3-2.TextLSTM/TextLSTM.py"
S2S = "4-1.Seq2Seq/Seq2Seq.py"
ATT = "4-2.Seq2Seq(Attention)/Seq2Seq(Attention).py"
BIATT = "4-3.Bi-LSTM(Attention)/Bi-LSTM(Attention).py"


def case(name, script, label, patch=None):
    return {"name": name, "script": script, "args": [], "cwd": script.rsplit("/", 1)[0], "data": None, "env": {},
            "patch": patch, "timeout": 240, "label": dict({"seeded": False, "origins": None}, **label)}


CASES = [
    case("graykode_nnlm_healthy", NNLM, {
        "healthy": True, "kinds": [],
        "root": "as published: NNLM (embedding 2, tanh hidden 2, direct connections) on 3 sentences, full batch, "
                "Adam lr 0.001",
        "steps": None, "optimizer_steps": 5000,
        "note": "`for epoch in range(5000)`, one step each. 2 traced draws: loss 1.76 -> 1.33 (step 100) -> 0.060 "
                "(1000) -> 0.0037 (3000) -> 0.00085 (4999); 2.03 -> 1.50 -> 0.067 -> 0.0040 -> 0.00096; "
                "prediction dog/coffee/milk (all right), exit 0.",
    }),
    case("graykode_textcnn_healthy", CNN, {
        "healthy": True, "kinds": [],
        "root": "as published: TextCNN (3 conv filters of height 2 over 2-d embeddings, ReLU, max-pool) on 6 "
                "sentences, 2 classes, Adam lr 0.001",
        "steps": None, "optimizer_steps": 5000,
        "note": "5000 epochs, one step each. 3 draws: loss 0.69 -> 0.44 (step 100) -> 0.0031 (1000) -> 4.1e-5 "
                "(4999); 0.68 -> 0.44 -> 0.0027 -> 3.1e-5; printed 0.0029 (1000) -> 4.1e-5 (5000); "
                "'sorry hate you is Bad Mean...', exit 0.",
    }),
    case("graykode_textcnn_softmax_into_ce", CNN, patch={
        "file": CNN,
        "old": "model = self.Weight(h_pool_flat) + self.Bias # [batch_size, num_classes]",
        "new": "model = torch.softmax(self.Weight(h_pool_flat) + self.Bias, dim=1) # [batch_size, num_classes]",
        "why": "softmax applied to the logits before CrossEntropyLoss (which applies log-softmax itself)"}, label={
        "healthy": False, "kinds": ["loss_misuse", "loss_plateau", "saturated_activation"],
        "root": "probabilities, not logits, go into CrossEntropyLoss: with 2 classes the loss cannot go below "
                "log(1 + e^-1) = 0.3133, and its gradient vanishes as the softmax saturates",
        "steps": [0, 1000], "optimizer_steps": 5000, "lr": 0.001, "mention": r"softmax",
        "note": "2 traced draws: loss 0.72 -> 0.59 (step 100) -> 0.32 (500) -> 0.3147 (1000) -> 0.3133 (4999); "
                "0.66 -> 0.56 -> 0.32 -> 0.3151 -> 0.3133: flat at the bound from step ~1000, against 4e-5 for "
                "the published script (classes still separated: 'Bad Mean'), exit 0. Harness --plain draw: printed "
                "0.315360 (1000) -> 0.313285 (5000).",
    }),
    case("graykode_textrnn_healthy", RNN, {
        "healthy": True, "kinds": [],
        "root": "as published: nn.RNN(one-hot, hidden 5) reads 2 words, Linear on the last step's output predicts "
                "the 3rd word; 3 sentences, Adam lr 0.001",
        "steps": None, "optimizer_steps": 5000,
        "note": "5000 epochs. 3 draws: loss 1.96 -> 1.46 (step 100) -> 0.16 (1000) -> 0.013 (3000) -> 0.0030 "
                "(4999); 1.90 -> 1.37 -> 0.14 -> 0.011 -> 0.0029; printed 0.081 (1000) -> 0.0014 (5000); "
                "dog/coffee/milk, exit 0.",
    }),
    case("graykode_textrnn_first_step_output", RNN, patch={
        "file": RNN,
        "old": "outputs = outputs[-1] # [batch_size, num_directions(=1) * n_hidden]",
        "new": "outputs = outputs[0] # [batch_size, num_directions(=1) * n_hidden]",
        "why": "indexing slip: the classifier reads the RNN output at the first time step instead of the last; "
               "every sentence starts with 'i', so the prediction cannot depend on the input"}, label={
        "healthy": False, "kinds": ["loss_plateau", "no_gradient", "unchanged_weights"],
        "root": "the output of time step 0 (the word 'i', the same for all 3 sentences, h0 = 0) feeds the "
                "classifier: the model can only learn the uniform prediction, the loss stops at ln 3 = 1.0986; "
                "rnn.weight_hh_l0 gets an exactly zero gradient (it multiplies h0 = 0) and never changes",
        "steps": [0, 1000], "optimizer_steps": 5000, "lr": 0.001,
        "note": "2 traced draws: loss 1.98 -> 1.60 (step 100) -> 1.15 (500) -> 1.111 (1000) -> 1.0990 (4999); "
                "1.92 -> 1.57 -> 1.15 -> 1.110 -> 1.0990; one word predicted for all 3, exit 0 (published: 0.003). "
                "Harness --plain draw: printed 1.1068 (1000) -> 1.0989 (5000), milk/milk/milk. "
                "rnn.weight_hh_l0: gradient norm 0.0 at every sampled step, weight norm 1.42 from step 0 to the end.",
    }),
    case("graykode_textlstm_healthy", LSTM, {
        "healthy": True, "kinds": [],
        "root": "as published: nn.LSTM(one-hot 26, hidden 128) reads 3 letters, Linear predicts the 4th; 10 words, "
                "Adam lr 0.001",
        "steps": None, "optimizer_steps": 1000,
        "note": "`for epoch in range(1000)`. 3 draws: loss 3.26 -> 1.23 (step 50) -> 0.035 (200) -> 0.0028 (500) "
                "-> 0.00062 (999); 3.24 -> 1.23 -> 0.041 -> 0.0030 -> 0.00066; printed 0.00066 at 1000; all 10 "
                "letters right, exit 0.",
    }),
    case("graykode_textlstm_output_detached", LSTM, patch={
        "file": LSTM,
        "old": "outputs = outputs[-1]  # [batch_size, n_hidden]",
        "new": "outputs = outputs[-1].detach()  # [batch_size, n_hidden]",
        "why": "a .detach() left on the LSTM's output cuts the graph: the LSTM never gets a gradient and keeps "
               "its random init; only the output Linear trains"}, label={
        "healthy": False, "kinds": ["no_gradient", "unchanged_weights"],
        "root": "the LSTM's parameters get no gradient (its output is detached): they stay at their random init; "
                "the classifier alone fits random features slowly",
        "origins": ["lstm"], "steps": [0, 2], "optimizer_steps": 1000, "lr": 0.001,
        "note": "2 traced draws: loss 3.25 -> 2.60 (step 100) -> 1.38 (500) -> 0.95 (999); 3.25 -> 2.60 -> 1.38 "
                "-> 0.96, against 0.0006 for the published script; predicts e,d,e,e,e,e,e,e,e,e: 6 of 10 right "
                "(published: 10 of 10), exit 0. Harness --plain draw: printed 2.60 (100) -> 1.39 (500) -> 0.969 (1000). lstm.*: .grad None at every step, weight norms unchanged.",
    }),
    case("graykode_seq2seq_healthy", S2S, {
        "healthy": True, "kinds": [],
        "root": "as published: one-hot RNN encoder (hidden 128) -> RNN decoder with teacher forcing, 6 word pairs, "
                "the loss summed over the 6 pairs, Adam lr 0.001",
        "steps": None, "optimizer_steps": 5000,
        "note": "5000 epochs. 3 draws: loss 20.2 -> 9.8 (step 20) -> 2.6 (100) -> 0.080 (200) -> 0.0034 (1000) "
                "-> 0.00011 (4999); 20.2 -> 10.3 -> 3.5 -> 0.079 -> 0.0033 -> 0.00010; printed 0.0032 (1000) -> "
                "0.00010 (5000); man->women, king->queen, black->white, upp->down, exit 0.",
    }),
    case("graykode_seq2seq_loss_sign_flipped", S2S, patch={
        "file": S2S,
        "old": "loss += criterion(output[i], target_batch[i])",
        "new": "loss -= criterion(output[i], target_batch[i])",
        "why": "the loss's sign flipped while accumulating it: the optimizer maximises the cross-entropy"}, label={
        "healthy": False, "kinds": ["loss_misuse", "loss_divergence"],
        "root": "minimising -CrossEntropy pushes the true tokens' probabilities to zero: the (negated) loss falls "
                "without bound, the logits grow every step",
        "steps": [0, 20], "optimizer_steps": 5000, "lr": 0.001, "exit": 1,
        "note": "2 traced draws: loss -20.2 -> -25.1 (step 10) -> -192 (100) -> -1666 (1000) -> -7749 (4999); "
                "-20.2 -> -25.6 -> -186 -> -1751 -> -7970, falling linearly; then the script's own test decoding "
                "raises ValueError(\"'E' is not in list\") (no end token is ever predicted): exit 1 in each draw. "
                "Harness --plain draw: printed -1703 (1000) -> -7827 (5000), exit 1.",
    }),
    case("graykode_seq2seq_adam_lr1000x", S2S, patch={
        "file": S2S,
        "old": "optimizer = torch.optim.Adam(model.parameters(), lr=0.001)",
        "new": "optimizer = torch.optim.Adam(model.parameters(), lr=1)",
        "why": "learning rate 1000x too large (Adam lr 1 instead of 0.001)"}, label={
        "healthy": False,
        "kinds": ["loss_divergence", "exploding_gradient", "unstable_loss", "saturated_activation",
                  "vanishing_gradient"],
        "root": "Adam lr 1: the first updates blow the RNN weights up (enc weight_hh norm 6.5 -> 128 after one "
                "step -> 721), the loss jumps from 20 to 80-320 and never comes back; the tanh RNNs saturate "
                "(98-99.8% of units) and stop passing gradient",
        "steps": [0, 5], "optimizer_steps": 5000, "lr": 1, "mention": r"learning rate|\blr\b",
        "note": "2 traced draws: loss 20.1, 83.7, 322 (step 2), 216 (10), 204 (100), 151 (1000), 229 (4999), mean "
                "per 500 steps 170-197; 20.2, 113, 251, 283 (10), 68 (100), 45 (1000), 76 (4999), mean 65-81 "
                "(the published script: 0.0001). Translations all 'wh' / 'wuwtn', exit 0. Traced: gradient norm "
                "of enc weight_hh 0.21 (step 0) -> 22229 (step 1); enc/dec tanh |h|>0.99 for 98%/99.6% of units "
                "from step ~50, encoder gradients 0.0 from step ~100. Harness --plain draw: printed 54.1 (1000), 45.5, "
                "152.6, 105.0, 97.6 (5000), all translations 'woyn', exit 0. Five more plain draws (a later "
                "session): exit 0 in four, and in one the script's own test decoding raised `ValueError: 'E' is not "
                "in list` (exit 1).",
        "exit": [0, 1],
    }),
    case("graykode_seq2seq_no_zero_grad", S2S, patch={
        "file": S2S,
        "old": "        optimizer.zero_grad()\n",
        "new": "",
        "why": "optimizer.zero_grad() left out of the training loop: every step's gradient adds to all earlier ones"},
        label={
        "healthy": False,
        "kinds": ["loop_misuse", "loss_divergence", "unstable_loss", "exploding_gradient", "saturated_activation"],
        "root": "no optimizer.zero_grad(): .grad holds the sum of all past steps' gradients, so Adam keeps moving "
                "along old directions; the loss falls for ~50 steps, then climbs far above its start while the "
                "accumulated gradient and the weights grow and the RNNs saturate",
        "steps": [0, 100], "optimizer_steps": 5000, "lr": 0.001, "mention": r"zero_grad|accumulat",
        "note": "2 traced draws: loss 20.1 -> 8.4 (step 50) -> 9.8 (100) -> 29 (500) -> 42 (1000) -> 77 (4999); "
                "20.3 -> 7.2 (50) -> 9.3 (100) -> 32 -> 40 -> 91 (the published script: 0.0001); translations all "
                "'domt' / 'whie', exit 0. Traced: fc.weight .grad norm 1.9 (step 0) -> 125 (50) -> 1126 (1000) "
                "-> 2600 (4999); tanh |h|>0.99: 0 -> 51%/29% (step 50) -> 100%/99.7% (enc/dec, end). Harness --plain "
                "draw: printed 36.1 (1000) -> 44.3 -> 59.8 -> 75.2 -> 72.2 (5000), exit 0. Six more plain draws "
                "(a later session): exit 0 in five, and in one the script's own test decoding raised "
                "`ValueError: 'E' is not in list` (exit 1), as the sign-flipped case does on every draw.",
        "exit": [0, 1],
    }),
    case("graykode_seq2seq_attention_healthy", ATT, {
        "healthy": True, "kinds": [],
        "root": "as published: RNN encoder-decoder (hidden 128) with dot-product attention over the encoder "
                "outputs, one sentence pair, Adam lr 0.001",
        "steps": None, "optimizer_steps": 2000,
        "note": "`for epoch in range(2000)`. 3 draws: loss 2.40 -> 1.35 (step 10) -> 0.25 (20) -> 0.0089 (50) -> "
                "0.00032 (500) -> 2.7e-5 (1999); 2.44 -> 1.37 -> 0.22 -> 0.0085 -> 0.00035 -> 3.2e-5; printed "
                "0.00046 (400) -> 2.8e-5 (2000); 'i want a beer E', exit 0.",
    }),
    case("graykode_bilstm_attention_healthy", BIATT, {
        "healthy": True, "kinds": [],
        "root": "as published: embedding 2 -> BiLSTM (hidden 5) -> attention on the final state -> Linear, "
                "6 sentences, 2 classes, Adam lr 0.001",
        "steps": None, "optimizer_steps": 5000,
        "note": "5000 epochs. 3 draws: loss 0.71 -> 0.61 (step 100) -> 0.019 (500) -> 0.0035 (1000) -> 6.2e-5 "
                "(4999); 0.71 -> 0.64 -> 0.016 -> 0.0032 -> 7.0e-5; printed 0.0040 (1000) -> 9.8e-5 (5000); "
                "'Bad Mean', exit 0.",
    }),
    case("graykode_bilstm_attention_weight_decay1", BIATT, patch={
        "file": BIATT,
        "old": "optimizer = optim.Adam(model.parameters(), lr=0.001)",
        "new": "optimizer = optim.Adam(model.parameters(), lr=0.001, weight_decay=1)",
        "why": "weight_decay=1 (meant 1e-4 or so): the L2 pull outweighs the data gradient"}, label={
        "healthy": False, "kinds": ["loss_plateau", "vanishing_gradient", "unchanged_weights"],
        "root": "Adam weight_decay=1 drives every weight to zero (LSTM and output weights exactly 0 by the end): "
                "the output is constant, the loss sits at ln 2 = 0.6931 and the gradients vanish; once at zero "
                "the weights no longer change",
        "steps": [0, 500], "optimizer_steps": 5000, "lr": 0.001, "mention": r"weight.?decay",
        "note": "2 traced draws: loss 0.691 -> 0.689 (step 100) -> 0.6931 (500) -> 0.693147 (1000 to 4999); 0.712 "
                "-> 0.699 -> 0.6932 -> 0.693147 (published: 6e-5); 'sorry hate you is Good Mean!!' (wrong), exit "
                "0. Traced: out.weight norm 0.75 -> 0.030 (step 500) -> 0 (4999), LSTM weights 0 to 1e-10 at the "
                "end, every gradient norm <= 0.007 at step 500 and 0.0 at the end. Harness --plain draw: printed "
                "0.693147 at 1000-5000, 'Good Mean!!'.",
    }),
]
