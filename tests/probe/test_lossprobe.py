"""The loss-call probe in-process: what `StepRecord.loss_calls` holds for wrongly and rightly called losses."""

import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from neuraldbg_cli.probe.hooks import Probe
from neuraldbg_cli.trace.events import LossCallStats


class Recorder:
    def __init__(self, every=1):
        self.records = []
        self.probe = Probe(self.records.extend, lambda: None, every=every, warn=lambda m: None)

    def __enter__(self):
        self.probe.install()
        return self

    def __exit__(self, *exc):
        self.probe.close()
        assert not self.probe.faults


def _calls(loss_fn, head, x, y, steps=2, every=1):
    """Train `head` (applied to a linear model's output) with `loss_fn(pred, y)`; the loss calls seen."""
    torch.manual_seed(0)
    model = nn.Linear(x.shape[1], 3 if y.dtype == torch.int64 else (1 if y.dim() < 2 else y.shape[1]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's broadcasting warning
        with Recorder(every) as rec:
            for _ in range(steps):
                opt.zero_grad()
                loss_fn(head(model(x)), y).backward()
                opt.step()
    return [r.loss_calls for r in rec.records]


def fn(name):
    """A functional loss looked up at the call (the probe patches torch.nn.functional once installed)."""
    return lambda *a, **k: getattr(F, name)(*a, **k)


X = torch.randn(16, 4)
LABELS = torch.randint(0, 3, (16,))


def _one(calls, name) -> LossCallStats:
    assert all(name in c for c in calls), calls
    return calls[-1][name]


def test_mse_of_a_column_against_a_vector_broadcasts():
    s = _one(_calls(fn("mse_loss"), lambda p: p, X, torch.randn(16)), "mse_loss")
    assert (s.input_shape, s.target_shape, s.broadcast_shape) == ((16, 1), (16,), (16, 16))
    assert (s.reduction, s.dtype, s.module, s.terms) == ("mean", "float32", None, 16)
    ok = _one(_calls(nn.MSELoss(), lambda p: p, X, torch.randn(16, 1)), "mse_loss")
    assert ok.broadcast_shape is None and ok.module == "MSELoss"
    scalar = _one(_calls(fn("l1_loss"), lambda p: p.squeeze(1), X, torch.zeros(1)), "l1_loss")
    assert scalar.broadcast_shape is None  # a scalar target broadcast on purpose: still the input's shape


@pytest.mark.parametrize("loss_fn", [fn("cross_entropy"), nn.CrossEntropyLoss()])
def test_softmax_before_cross_entropy_shows_probability_rows(loss_fn):
    s = _one(_calls(loss_fn, lambda p: p.softmax(1), X, LABELS), "cross_entropy")
    assert s.classes == 3 and s.terms == 16 and s.min >= 0 and s.max <= 1 and s.row_sum_dev < 1e-5
    raw = _one(_calls(loss_fn, lambda p: p, X, LABELS), "cross_entropy")
    assert raw.min < 0 and raw.row_sum_dev > 1e-2


def test_sigmoid_before_bce_with_logits_and_raw_logits_into_nll():
    y = torch.randint(0, 2, (16, 1)).float()
    s = _one(_calls(nn.BCEWithLogitsLoss(), torch.sigmoid, X, y), "binary_cross_entropy_with_logits")
    assert 0 <= s.min and s.max <= 1 and s.row_sum_dev is None and s.module == "BCEWithLogitsLoss"
    s = _one(_calls(fn("nll_loss"), lambda p: p, X, LABELS), "nll_loss")
    assert s.max > 0
    s = _one(_calls(nn.NLLLoss(), lambda p: p.log_softmax(1), X, LABELS), "nll_loss")
    assert s.max <= 0 and s.module == "NLLLoss"


def test_sum_reduction_and_unsampled_steps():
    calls = _calls(lambda p, y: F.cross_entropy(p, y, reduction="sum"), lambda p: p, X, LABELS, steps=14, every=5)
    assert calls[0]["cross_entropy"].reduction == "sum"
    # sampled: the first 10 steps, then every 5th (every_n); nothing read on the others
    assert [i for i, c in enumerate(calls) if c] == list(range(10)) + [10]
    assert all(math.isfinite(c["cross_entropy"].min) for c in calls if c)


def test_loss_inside_a_model_or_under_no_grad_is_not_read():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    with Recorder() as rec:
        with torch.no_grad():
            F.cross_entropy(model(X), LABELS)
        loss = F.cross_entropy(model(X), LABELS)  # counted: a backward follows
        F.nll_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))  # the same step: no grad needed
        loss.backward()
    assert list(rec.records[0].loss_calls) == ["cross_entropy", "nll_loss"]


def test_a_class_loss_a_model_computes_in_its_forward_is_read_and_a_loss_module_once():
    """nanoGPT and Hugging Face models return their own cross-entropy: read on sampled steps (its class count
    gives the loss series its chance level); a loss module's inner F call is not read a second time."""

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(4, 7)
            self.crit = nn.CrossEntropyLoss(label_smoothing=0.1)

        def forward(self, x, y, module_loss=False):
            logits = self.head(x)
            return self.crit(logits, y) if module_loss else F.cross_entropy(logits, y, ignore_index=-1)

    torch.manual_seed(0)
    model = LM()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    y = torch.randint(0, 7, (16,))
    with Recorder(every=5) as rec:
        for step in range(12):
            opt.zero_grad()
            model(X, y, module_loss=step == 1).backward()
            opt.step()
    assert [i for i, r in enumerate(rec.records) if r.loss_calls] == [*range(10), 10]  # sampled steps only
    s = rec.records[0].loss_calls["cross_entropy"]
    assert s.classes == 7 and s.module is None and s.input_shape == (16, 7)
    assert list(rec.records[1].loss_calls) == ["cross_entropy"]  # the module's inner call: one record


BIN = torch.randint(0, 2, (16, 1)).float()


@pytest.mark.parametrize(
    "loss_fn, head, y, name, state",
    [
        (fn("mse_loss"), lambda p: p, torch.randn(16), "mse_loss", "broadcast"),
        (nn.MSELoss(), lambda p: p, torch.randn(16), "mse_loss", "broadcast"),
        (fn("mse_loss"), lambda p: p, torch.randn(16, 1), "mse_loss", "normal"),
        (fn("cross_entropy"), lambda p: p.softmax(1), LABELS, "cross_entropy", "probabilities_to_ce"),
        (nn.CrossEntropyLoss(), lambda p: p.softmax(1), LABELS, "cross_entropy", "probabilities_to_ce"),
        (nn.CrossEntropyLoss(), lambda p: p, LABELS, "cross_entropy", "normal"),
        (fn("cross_entropy"), lambda p: p, LABELS, "cross_entropy", "normal"),
        (nn.BCEWithLogitsLoss(), torch.sigmoid, BIN, "binary_cross_entropy_with_logits", "probabilities_to_logits_loss"),
        (fn("binary_cross_entropy_with_logits"), lambda p: p, BIN, "binary_cross_entropy_with_logits", "normal"),
        (fn("nll_loss"), lambda p: p, LABELS, "nll_loss", "logits_to_nll"),
        (nn.NLLLoss(), lambda p: p.softmax(1), LABELS, "nll_loss", "probabilities_to_nll"),
        (fn("nll_loss"), lambda p: p.log_softmax(1), LABELS, "nll_loss", "normal"),
        (nn.NLLLoss(), nn.LogSoftmax(1), LABELS, "nll_loss", "normal"),
    ],
)
def test_real_calls_classify(loss_fn, head, y, name, state):
    from neuraldbg_cli.config import Thresholds
    from neuraldbg_cli.reason.families.lossfn import classify_loss_call

    calls = _calls(loss_fn, head, X, y, steps=3)
    assert [classify_loss_call(c[name], Thresholds()) for c in calls] == [state] * 3


@pytest.mark.parametrize("head, state", [(lambda s: s, "logits_to_nll"), (lambda s: s.log_softmax(2), "normal")])
@pytest.mark.parametrize("as_module", [True, False])
def test_ctc_loss_takes_log_probabilities(head, state, as_module):
    """nn.CTCLoss / F.ctc_loss expect log_softmax over the classes of (time, batch, classes); raw scores train on
    a wrong gradient (deepspeech-style models: Linear -> log_softmax -> transpose). One term per utterance."""
    from neuraldbg_cli.config import Thresholds
    from neuraldbg_cli.reason.families.lossfn import classify_loss_call

    torch.manual_seed(0)
    model = nn.Linear(4, 6)  # 5 symbols + blank
    x, targets = torch.randn(3, 10, 4), torch.randint(1, 6, (3, 4))  # (batch, time, features)
    in_lens, tgt_lens = torch.full((3,), 10), torch.full((3,), 4)
    ctc = nn.CTCLoss() if as_module else fn("ctc_loss")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with Recorder() as rec:
        for _ in range(2):
            opt.zero_grad()
            ctc(head(model(x)).transpose(0, 1), targets, in_lens, tgt_lens).backward()
            opt.step()
    calls = [r.loss_calls["ctc_loss"] for r in rec.records]
    assert all(c.classes == 6 and c.terms == 3 and c.input_shape == (10, 3, 6) for c in calls)
    assert [classify_loss_call(c, Thresholds()) for c in calls] == [state] * 2


def test_label_counts_counts_class_indices_and_drops_ignored_ones():
    import torch

    from neuraldbg_cli.probe.lossprobe import label_counts

    x = torch.randn(6, 4)
    t = torch.tensor([0, 2, 2, -100, 3, 2])  # -100: cross_entropy's ignore_index
    assert label_counts("cross_entropy", x, t).tolist() == [1.0, 0.0, 3.0, 1.0]
    seq = torch.randn(2, 4, 5)  # (N, C, d): targets (N, d)
    assert label_counts("cross_entropy", seq, torch.zeros(2, 5, dtype=torch.long)).tolist() == [10.0, 0.0, 0.0, 0.0]
    assert label_counts("cross_entropy", x, torch.rand(6, 4)) is None  # class probabilities, not indices
    assert label_counts("mse_loss", x, t) is None
    assert label_counts("cross_entropy", torch.randn(6, 1000), t) is None  # too many classes to count
