"""A delay cell continued from its final state reads the delayed states one call over the whole sequence reads.

Before, the final state of τ-GRU / Delay GRU was only h_N: a second call restarted the delay from zero history, so
running a sequence in pieces, or step by step (streaming, generation), silently gave other outputs than one call
(τ-GRU, τ = 2: 0.22 apart on outputs of size 0.68, step by step). The final state is now a ``DelayedState``
carrying the last max ⌊τ/h⌋ states; the references are the one-call outputs and gradients of the generic loop.
"""
import copy
import pickle

import pytest
import torch

import odelab
from odelab.kernels.cpu import common, extension
from odelab.solvers.recurrence import DelayedState

needs_kernels = pytest.mark.skipif(not extension.available(), reason="the CPU kernels did not build here")
CELLS = {
    "taugru": lambda: odelab.cells.TauGRU(2, 4, tau=2.0),
    "taugru-lag5": lambda: odelab.cells.TauGRU(2, 4, tau=5.0),
    "taugru-unfolds": lambda: odelab.Recurrent(odelab.systems.TauGRU(2, 4, tau=1.5), "euler", 1.0, unfolds=2),
    "delaygru": lambda: odelab.cells.DelayGRU(2, 4, tau=3.0),
    "taugru-no-gating": lambda: odelab.cells.TauGRU(2, 4, tau=2.0, gating=False),  # the generic loop under auto
}


def model_of(name, engine):
    torch.manual_seed(0)
    model = CELLS[name]().double()
    model.engine = engine
    return model


def loss_of(outputs, state):
    return (outputs * outputs.sin()).sum() + (state[0] ** 2).sum() + state.history[0].pow(2).sum()


@needs_kernels
@pytest.mark.parametrize("engine", ["generic", "auto"])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_pieces_and_steps_equal_one_call(name, engine):
    torch.manual_seed(1)
    x = torch.randn(3, 9, 2, dtype=torch.float64, requires_grad=True)
    h0 = (0.5 * torch.randn(3, 4, dtype=torch.float64)).requires_grad_()
    reference, model = model_of(name, "generic"), model_of(name, engine)
    whole, final = reference(x, (h0,))
    assert isinstance(final, DelayedState)
    inputs = [x, h0, *model.parameters()]
    expected = torch.autograd.grad(loss_of(whole, final), [x, h0, *reference.parameters()])
    for cuts in ([4], [1, 2, 3, 4, 5, 6, 7, 8], [7]):  # pieces of 4 + 5, step by step, 7 + 2
        outputs, state = [], (h0,)
        for a, b in zip([0, *cuts], [*cuts, 9]):
            out, state = model(x[:, a:b], state)
            outputs.append(out)
        pieces = torch.cat(outputs, dim=1)
        assert torch.allclose(pieces, whole, rtol=1e-12, atol=1e-13)
        assert torch.allclose(state[0], final[0], rtol=1e-12, atol=1e-13)
        assert torch.allclose(state.history[0], final.history[0], rtol=1e-12, atol=1e-13)
        for g, e in zip(torch.autograd.grad(loss_of(pieces, state), inputs), expected):
            assert torch.allclose(g, e, rtol=1e-10, atol=1e-12)


@needs_kernels
@pytest.mark.parametrize("name", ["taugru-lag5", "taugru-unfolds", "delaygru"])
def test_a_forward_in_chunks_continues_too(name, monkeypatch):
    """Without a backward the CPU kernels run chunks of samples (here of one sample, so the lag-5 history spans
    several chunks): 2 + 7 samples from the first part's state equal one call."""
    monkeypatch.setattr(common, "CHUNK_BYTES", 1)
    torch.manual_seed(1)
    x = torch.randn(3, 9, 2, dtype=torch.float64)
    model, reference = model_of(name, "fused"), model_of(name, "generic")
    with torch.no_grad():
        whole, final = reference(x)
        first, middle = model(x[:, :2])
        second, last = model(x[:, 2:], middle)
    assert torch.allclose(torch.cat((first, second), dim=1), whole, rtol=1e-12, atol=1e-13)
    assert torch.allclose(last.history[0], final.history[0], rtol=1e-12, atol=1e-13)


def test_the_history_is_checked_detached_and_copied():
    model = model_of("taugru", "generic")
    x = torch.randn(3, 5, 2, dtype=torch.float64)
    _, state = model(x)
    assert state.history[0].shape == (3, 2, 4)  # m = ⌊τ/Δt⌋ = 2 states before h_N
    assert state.history[0].requires_grad and not state.detach().history[0].requires_grad
    restored = pickle.loads(pickle.dumps(state.detach()))
    assert isinstance(restored, DelayedState) and torch.equal(restored.history[0], state.history[0])
    assert isinstance(copy.deepcopy(state.detach()), DelayedState)
    model.dt = 0.5  # m = 4 now: a history of 2 states no longer fits
    with pytest.raises(ValueError, match=r"state.history: expected blocks of shape \(3, 4, 4\).*got \(3, 2, 4\)"):
        model(x, state)
    model.dt = 1.0
    with pytest.raises(TypeError, match="state.history.*expected torch.float64"):
        model(x, DelayedState(tuple(state), (state.history[0].float(),)))
    plain, _ = model(x, tuple(state))  # a plain tuple: zero history, as at the start
    continued, _ = model(x, state)
    assert not torch.allclose(plain, continued)


def test_a_delayed_state_is_a_pytree():
    """torch.func transforms return it (a registered pytree node: blocks, then history)."""
    from torch.func import vmap

    model = model_of("taugru", "auto")
    x = torch.randn(3, 5, 2, dtype=torch.float64)
    out, state = vmap(lambda sample: model(sample[None]))(x)
    reference, final = model(x)
    assert isinstance(state, DelayedState)
    assert torch.allclose(out[:, 0], reference, atol=1e-14)
    assert torch.allclose(state.history[0][:, 0], final.history[0], atol=1e-14)
