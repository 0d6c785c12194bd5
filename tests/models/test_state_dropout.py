"""State dropout (the τ-GRU code's ``cell(x, dropout(h), x_delay, dropout(h_delay))``): every step starts from a
dropped copy of its state and reads dropped delayed states; the states kept are the steps' own. The reference is
τ-GRU's eq. 14 written out, with a deterministic stand-in for the dropout so that it can be followed exactly."""
import pytest
import torch
from helpers import replayed_dropout, state_dropout_masks

from odelab.kernels.chunks import delay_factors
from odelab.models import cells
from odelab.solvers.recurrence import delay_lags, run_sequence
from odelab.solvers.schemes import resolve_scheme


def taugru_by_hand(x, s, tau, drop):
    """h_{n+1} = (1 − g) ⊙ h̃ + g ⊙ (u + a ⊙ z) with h̃ = drop(h_n), h̃_τ = drop(h_{n−τ}) (zero history):
    u = tanh(W1 h̃ + U1 x + b1), z = tanh(W2 h̃_τ + U2 x + b2), g = σ(W3 h̃ + U3 x + b3), a = σ(W4 h̃ + U4 x + b4)."""
    hs = [x.new_zeros(x.shape[0], s["W1"].shape[0])]
    for n, x_n in enumerate(x.unbind(1)):
        h = drop(hs[-1])
        delayed = drop(hs[-1 - tau] if len(hs) > tau else torch.zeros_like(h))
        u = torch.tanh(h @ s["W1"].T + x_n @ s["U1"].T + s["b1"])
        z = torch.tanh(delayed @ s["W2"].T + x_n @ s["U2"].T + s["b2"])
        g = torch.sigmoid(h @ s["W3"].T + x_n @ s["U3"].T + s["b3"])
        a = torch.sigmoid(h @ s["W4"].T + x_n @ s["U4"].T + s["b4"])
        hs.append((1 - g) * h + g * (u + a * z))
    return torch.stack(hs[1:], 1)


def test_the_loop_drops_the_state_each_step_starts_from_and_the_delayed_state_it_reads():
    torch.manual_seed(0)
    cell = cells.TauGRU(2, 4, tau=3.0).double()
    x = torch.randn(3, 8, 2, dtype=torch.float64)
    drop = lambda block: 0.5 * block  # noqa: E731 -- a stand-in that can be followed by hand
    state = cell.starting_state(x)
    out, _ = run_sequence(cell.system, resolve_scheme("euler"), x, state, 1.0, 1, delay_lags(cell.system, 1.0),
                          drop=drop)
    assert torch.allclose(out, taugru_by_hand(x, cell.system.symbols(), 3, drop), atol=1e-14)
    plain, _ = run_sequence(cell.system, resolve_scheme("euler"), x, state, 1.0, 1, delay_lags(cell.system, 1.0))
    assert torch.allclose(plain, taugru_by_hand(x, cell.system.symbols(), 3, lambda b: b), atol=1e-14)


def test_state_dropout_acts_while_training_only_and_on_the_generic_loop():
    torch.manual_seed(1)
    plain = cells.LEM(2, 6, dt=0.5).double()
    dropped = cells.LEM(2, 6, dt=0.5).double()
    dropped.state_dropout = 0.3
    dropped.load_state_dict(plain.state_dict())
    x = torch.randn(4, 10, 2, dtype=torch.float64)
    assert plain.kernel(x) is not None and dropped.kernel(x) is None  # LEM has a CPU kernel: the loop takes over
    out = dropped(x)[0]
    assert not torch.allclose(out, plain(x)[0])
    out.square().sum().backward()
    assert all(p.grad is not None for p in dropped.parameters())
    dropped.eval()
    assert dropped.kernel(x) is not None and torch.allclose(dropped(x)[0], plain(x)[0], atol=1e-14)
    dropped.train()
    dropped.engine = "fused"
    with pytest.raises(ValueError, match="state dropout while training"):
        dropped(x)


def test_the_mask_is_fresh_at_every_step():
    """The masks drawn at the five steps of one sequence are not all the same."""
    seen = []

    def drop(block):
        mask = torch.nn.functional.dropout(torch.ones_like(block), 0.5, training=True)
        seen.append(mask)
        return block * mask

    torch.manual_seed(2)
    cell = cells.GRUODE(1, 64).double()
    x = torch.zeros(1, 5, 1, dtype=torch.float64)
    run_sequence(cell.system, resolve_scheme("euler"), x, cell.starting_state(x), 1.0, drop=drop)
    assert len(seen) == 5 and not all(torch.equal(seen[0], m) for m in seen[1:])


def test_state_dropout_must_be_a_probability():
    with pytest.raises(ValueError, match="state_dropout"):
        cells.TauGRU(1, 2, tau=2.0, state_dropout=1.0)


@pytest.mark.parametrize("make", [lambda: cells.TauGRU(2, 4, tau=2.0, dt=0.5), lambda: cells.DelayGRU(2, 4, tau=0.2),
                                  lambda: cells.GRUODE(2, 4, dt=0.3)], ids=["taugru", "delaygru-lag0", "gru-ode"])
def test_given_factors_drop_as_the_loop_does(make):
    """``drop`` as factors (batch, steps, 2, width), the layout the kernels take, gives the loop with those masks
    drawn step by step (the delayed read's, then the start's)."""
    torch.manual_seed(5)
    cell = make().double()
    cell.unfolds = 2
    x = torch.randn(3, 6, 2, dtype=torch.float64)
    lags = delay_lags(cell.system, cell.dt / 2) if cell.system.is_delay else ()
    masks = state_dropout_masks(3, 12, 4, 0.4)
    state = cell.starting_state(x)
    given, _ = run_sequence(cell.system, resolve_scheme("euler"), x, state, cell.dt, 2, lags, drop=masks)
    drawn, _ = run_sequence(cell.system, resolve_scheme("euler"), x, state, cell.dt, 2, lags,
                            drop=replayed_dropout(masks, delayed=bool(lags)))
    plain, _ = run_sequence(cell.system, resolve_scheme("euler"), x, state, cell.dt, 2, lags)
    assert torch.equal(given, drawn) and not torch.allclose(given, plain)


def test_factors_of_the_wrong_shape_or_for_two_blocks_are_refused():
    lem = cells.LEM(2, 4, dt=0.5).double()
    x = torch.randn(3, 5, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="one-block system"):
        run_sequence(lem.system, resolve_scheme("imex"), x, lem.starting_state(x), 0.5, drop=torch.ones(3, 5, 2, 4))
    tau = cells.TauGRU(2, 4, tau=1.0).double()
    with pytest.raises(ValueError, match=r"\(3, 5, 2, 4\)"):
        run_sequence(tau.system, resolve_scheme("euler"), x, tau.starting_state(x), 1.0, lags=(1,),
                     drop=torch.ones(3, 4, 2, 4, dtype=torch.float64))


def test_the_drawn_factors():
    """0 with probability p, else 1/(1 − p), independently for the start and the delayed read; a delay kernel without
    a delay (τ = 0) reads one factor for both (the cell's delayed read is its start); a two-block cell draws at each
    step instead."""
    torch.manual_seed(6)
    p = 0.25
    cell = cells.TauGRU(2, 64, tau=2.0, state_dropout=p)
    x = torch.zeros(16, 50, 2)
    factors = cell._drop(x, (2,))
    assert factors.shape == (16, 50, 2, 64)
    zeros = (factors == 0).double().mean().item()
    assert abs(zeros - p) < 0.01 and torch.all((factors == 0) | (factors == 1 / (1 - p)))
    assert not torch.equal(factors[:, :, 0], factors[:, :, 1])
    tied = delay_factors(cells.TauGRU(2, 64, tau=0.0, state_dropout=p)._drop(x, ()), x, 1, 64, ())
    assert torch.equal(tied[:, :, 0], tied[:, :, 1])
    with pytest.raises(ValueError, match=r"\(16, 50, 2, 64\)"):
        delay_factors(factors[:, 1:], x, 1, 64, (2,))
    lem = cells.LEM(2, 8)
    lem.state_dropout = p
    assert callable(lem._drop(x, ()))
    cell.eval()
    assert cell._drop(x, (2,)) is None
