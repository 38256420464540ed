"""spro/practical-pytorch: no usable case. Every training script in the repository fails on its own, as published,
under Python 3 and torch 2.x, before its first logged step (checked at COMMIT with torch 2.13 CPU, on the
repository's own data/names/*.txt and on a small text file):

- char-rnn-classification/train.py: `return output, loss.data[0]` raises `IndexError: invalid index of a 0-dim
  tensor` after the first optimizer step (also 100000 iterations hard-coded, no flags).
- conditional-char-rnn/train.py: `target_line_tensor[i]` is a 0-dim target for a (1, n_letters) output, so the
  first `criterion(output, target)` raises `ValueError: Expected input batch_size (1) to match target batch_size
  (0)`; the same `loss.data[0]` follows it.
- char-rnn-generation/train.py: imports `unidecode` (not installed here); with a stand-in module it fails the
  same way as conditional-char-rnn (`criterion(output, target[c])` with a 0-dim target: batch size 1 vs 0),
  and `loss.data[0]` comes after it.
- reinforce-gridworld/reinforce-gridworld.py: imports `sconce` and reports to a sconce job; `value.data[0]`.
- seq2seq-translation/seq2seq-translation-batched.py: connects to a visdom server at import, `USE_CUDA = True`
  hard-coded, `loss.data[0]`.

Each would need an edit unrelated to any training bug to run at all, so none is an unmodified public script
and the module offers no case. Kept so that the check is not redone."""
REPO = "spro/practical-pytorch"
COMMIT = "c520c52e68e945d88fff563dba1c028b6ec0197b"

CASES = []
