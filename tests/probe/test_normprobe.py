"""The normalisation probe in-process: what `StepRecord.norms` holds, against torch's own statistics."""

import pytest
import torch
import torch.nn as nn

from tests.probe.test_lossprobe import Recorder


def _train(model, batches, opt=None):
    opt = opt or torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    with Recorder() as rec:
        for x in batches:
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    return rec.records


def test_batch_statistics_against_running_ones_as_torch_computes_them():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(4)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), bn)
    nn.init.uniform_(bn.weight, 0.5, 1.5)
    batches = [torch.randn(8, 3, 6, 6) + 2.0 for _ in range(3)]
    records = _train(model, batches, torch.optim.SGD(model.parameters(), lr=0.0))  # weights as the forward saw
    ns = records[-1].norms[("Sequential", "1")]
    with torch.no_grad():  # read after the forward: against running statistics that include this batch
        var_b, mu_b = torch.var_mean(model[0](batches[-1]), dim=(0, 2, 3), unbiased=False)
        shift = ((mu_b - bn.running_mean).abs() / (bn.running_var + bn.eps).sqrt()).median()
        log_scale = ((var_b + bn.eps).log() - (bn.running_var + bn.eps).log()).abs().median()
    assert ns.training and ns.calls == 1 and ns.batch == 8 and ns.per_channel == 8 * 4 * 4
    assert ns.tracked == 3.0 and ns.running_finite == 1.0 and ns.running_initial == 0.0
    assert ns.gain_rms == pytest.approx(bn.weight.detach().norm().item() / 2, rel=1e-5)
    assert ns.shift == pytest.approx(shift.item(), rel=1e-4) and ns.log_scale == pytest.approx(
        log_scale.item(), rel=1e-4
    )


def test_each_training_call_of_a_step_is_counted():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with Recorder() as rec:
        for _ in range(2):
            opt.zero_grad()
            (model(torch.randn(16, 5)).mean() + model(torch.randn(16, 5) + 3).mean()).backward()  # real, then fake
            opt.step()
    ns = rec.records[-1].norms[("Sequential", "1")]
    assert ns.calls == 2 and ns.tracked == 3.0  # read at the step's first call: BN had run 3 times then
