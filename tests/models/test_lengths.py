"""Sequences of different lengths in one batch (``lengths=``), against each sample run alone on its own steps.

The reference is the generic loop (the definition) called once per sample on x[b, :lengths[b]]: its outputs, its
final state (a delay cell's history included) and the gradients of a loss summed over the samples."""
import pytest
import torch

import odelab
from odelab.models.heads import SequenceRegressor
from odelab.models.unicornn import UnICORNNStack

MODELS = {
    "lem": lambda: odelab.cells.LEM(2, 4, dt=0.6),
    "cornn": lambda: odelab.cells.CoRNN(2, 4, dt=0.4),
    "gru-ode": lambda: odelab.cells.GRUODE(2, 4, dt=0.8),
    "taugru": lambda: odelab.cells.TauGRU(2, 4, tau=2.0),  # the pieces continue through the DelayedState
    "ltc": lambda: odelab.cells.LTC(2, 4, dt=1.0, unfolds=2),
    "unicornn": lambda: UnICORNNStack(2, 4, num_layers=2, dt=0.9, alpha=0.4),
    "unicornn-reversible": lambda: UnICORNNStack(2, 4, num_layers=2, dt=0.9, alpha=0.4, reversible=True),
}
LENGTHS = [7, 3, 5, 3, 1, 6]  # ties, a one-step sample, none of the whole 8 steps: zeros at the end for all


def model_of(name, engine):
    torch.manual_seed(0)
    model = MODELS[name]().double()
    model.engine = engine
    return model


def flat(state):
    """Every tensor of a final state (per layer for a stack; a DelayedState's history too)."""
    if isinstance(state, list):
        return [t for s in state for t in flat(s)]
    return [*state, *getattr(state, "history", ())]


def loss_of(outputs, state):
    return (outputs * outputs.sin()).sum() + sum((t**2).sum() for t in flat(state))


@pytest.mark.parametrize("engine", ["generic", "auto"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_sample_ends_at_its_length(name, engine):
    torch.manual_seed(1)
    x = torch.randn(len(LENGTHS), 8, 2, dtype=torch.float64, requires_grad=True)
    model, reference = model_of(name, engine), model_of(name, "generic")
    out, final = model(x, lengths=torch.tensor(LENGTHS))
    assert out.shape == (len(LENGTHS), 8, 4)
    expected_loss, outputs, finals = 0.0, [], []
    for b, n in enumerate(LENGTHS):
        o, f = reference(x[b:b + 1, :n])
        outputs.append(o[0])
        finals.append(flat(f))
        expected_loss = expected_loss + loss_of(o, f)
    for b, n in enumerate(LENGTHS):
        assert torch.allclose(out[b, :n], outputs[b], rtol=1e-12, atol=1e-13)
        assert torch.equal(out[b, n:], torch.zeros_like(out[b, n:]))
        for got, want in zip(flat(final), finals[b]):
            assert torch.allclose(got[b], want[0], rtol=1e-12, atol=1e-13)
    inputs = [x, *model.parameters()]
    got = torch.autograd.grad(loss_of(out, final), inputs)
    want = torch.autograd.grad(expected_loss, [x, *reference.parameters()])
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12)


def test_full_lengths_change_nothing_and_bad_lengths_are_refused():
    model = model_of("lem", "auto")
    x = torch.randn(3, 5, 2, dtype=torch.float64)
    out, final = model(x, lengths=[5, 5, 5])
    ref, ref_final = model(x)
    assert torch.equal(out, ref) and all(torch.equal(a, b) for a, b in zip(final, ref_final))
    for lengths, error, message in [([5, 5], ValueError, r"one length per sample \(3\), got 2"),
                                    ([5, 0, 2], ValueError, r"lengths in 1 … 5 \(x's steps\), got 0 … 5"),
                                    ([6, 1, 2], ValueError, r"got 1 … 6"),
                                    (torch.tensor([2.0, 1.0, 3.0]), TypeError, "integer tensor"),
                                    ([2, 1.5, 3], TypeError, "integer tensor or a list of ints")]:
        with pytest.raises(error, match=message):
            model(x, lengths=lengths)


def test_the_lstm_baseline_and_the_readout_take_lengths():
    torch.manual_seed(2)
    x = torch.randn(len(LENGTHS), 8, 2, dtype=torch.float64)
    lstm = odelab.cells.LSTM(2, 4).double()
    out, (h, c) = lstm(x, lengths=LENGTHS)
    for b, n in enumerate(LENGTHS):
        o, (hb, cb) = lstm.rnn(x[b:b + 1, :n])
        assert torch.allclose(out[b, :n], o[0], atol=1e-13) and torch.equal(out[b, n:], torch.zeros_like(out[b, n:]))
        assert torch.allclose(h[:, b], hb[:, 0], atol=1e-13) and torch.allclose(c[:, b], cb[:, 0], atol=1e-13)
    head = SequenceRegressor(model_of("lem", "auto"), 4, 3, last=True).double()
    y = head(x, lengths=LENGTHS)
    for b, n in enumerate(LENGTHS):
        assert torch.allclose(y[b], head(x[b:b + 1, :n])[0], rtol=1e-12, atol=1e-13)
