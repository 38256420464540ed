"""A class loss stalled at guessing while nothing else in the network is wrong: its inputs do not predict its
labels (inputs and labels shuffled apart), which the plateau names with the pairing check first. A plateau with
other findings, below chance, or of a regression gets no such claim. Hand-made traces, then real training."""
from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.loss import PAIRING_TIP, loss_plateau
from neuraldbg_cli.trace.events import EventType, SemanticEvent

TH = Thresholds()


def plateau(**metrics):
    base = dict(loss=1.35, start=1.36, best=1.32, recent=1.33, noise=0.017, improvement=0.008)
    return SemanticEvent(type=EventType.optimizer_instability.value, step=8, module=None, root="Net", from_="normal",
                         to="plateau", site="loss", metrics={**base, **metrics})


def dead():
    return SemanticEvent(type=EventType.activation_regime_shift.value, step=3, module="fc1", root="Net",
                         from_="normal", to="dead", site="activation", metrics={"dead_frac": 0.9})


def hyp(*events):
    return loss_plateau(Context(events=list(events), thresholds=TH))


def test_a_class_loss_at_guessing_with_nothing_else_wrong_names_the_pairing():
    h = hyp(plateau(chance_level=1.386))
    assert "shuffled apart" in h.summary and "ln(4)" in h.summary
    assert h.suggestions[0] == PAIRING_TIP


def test_a_class_loss_that_fell_to_chance_from_above_names_it_too():
    h = hyp(plateau(start=2.5, chance=1.099))
    assert "shuffled apart" in h.summary and h.suggestions[0] == PAIRING_TIP


def test_no_pairing_claim_with_other_findings_below_chance_or_without_classes():
    for h in (hyp(plateau(chance_level=1.386), dead()), hyp(plateau(recent=0.9, chance_level=1.386)), hyp(plateau())):
        assert "shuffled apart" not in h.summary and PAIRING_TIP not in h.suggestions


def test_labels_shuffled_apart_from_their_inputs_on_real_training(observe):
    broken = observe("labels_apart.py")
    top = broken.report["hypotheses"][0]
    assert top["kind"] == "loss_plateau" and "shuffled apart" in top["summary"], top
    assert top["suggestions"][0].startswith("check that each input keeps its own label")
    assert observe("labels_apart.py", "--apart", "0").report["status"] == "healthy"
