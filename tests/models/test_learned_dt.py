"""A learned step Δt = dt_max σ(θ) (Rusch's thesis, coRNN's training details): the cell equals the fixed-step cell at
the current Δt, and the gradient to θ is the chain rule through the fixed-step cell's derivative in Δt."""
import math

import pytest
import torch

from odelab.models import Recurrent, cells
from odelab.systems import LEM, TauGRU


def fixed_copy(learned, dt):
    model = cells.CoRNN(2, 3, dt=dt, gamma=1.3, epsilon=2.1).double()
    model.system.load_state_dict(learned.system.state_dict())
    return model


def test_the_learned_step_starts_at_dt_and_computes_the_fixed_step_cell():
    torch.manual_seed(0)
    learned = cells.CoRNN(2, 3, dt=0.3, gamma=1.3, epsilon=2.1, learn_dt=True).double()
    assert learned.dt == pytest.approx(0.3, abs=1e-7)
    with torch.no_grad():
        learned.dt_logit.fill_(0.4)
    x = torch.randn(4, 7, 2, dtype=torch.float64)
    expected = fixed_copy(learned, 1 / (1 + math.exp(-0.4)))(x)
    out, state = learned(x)
    assert torch.allclose(out, expected[0], atol=1e-13) and torch.allclose(state[1], expected[1][1], atol=1e-13)
    assert "learned, at most 1.0" in repr(learned)


def test_the_gradient_to_the_step_is_the_chain_rule_through_the_cells_derivative_in_dt():
    torch.manual_seed(1)
    learned = cells.CoRNN(2, 3, dt=0.3, gamma=1.3, epsilon=2.1, learn_dt=True).double()
    x = torch.randn(4, 7, 2, dtype=torch.float64)
    loss = learned(x)[0].square().sum()
    loss.backward()
    dt, h = 0.3, 1e-6
    loss_at = lambda step: float(fixed_copy(learned, step)(x)[0].square().sum().detach())
    d_loss_d_dt = (loss_at(dt + h) - loss_at(dt - h)) / (2 * h)
    assert float(learned.dt_logit.grad) == pytest.approx(d_loss_d_dt * dt * (1 - dt), rel=1e-6)  # dσ/dθ = σ(1 − σ)


def test_a_training_step_moves_the_step_and_lengths_still_end_each_sample():
    torch.manual_seed(2)
    learned = Recurrent(LEM(2, 3), "imex", 0.5, learn_dt=True, dt_max=2.0).double()
    assert learned.dt == pytest.approx(0.5)
    x = torch.randn(3, 6, 2, dtype=torch.float64)
    out, final = learned(x, lengths=[6, 2, 4])
    for b, n in enumerate([6, 2, 4]):
        alone, state = learned(x[b:b + 1, :n])
        assert torch.allclose(out[b, :n], alone[0], atol=1e-13) and torch.allclose(final[1][b], state[1][0], atol=1e-13)
    torch.optim.SGD(learned.parameters(), lr=0.1).zero_grad()
    out.square().sum().backward()
    before = learned.dt
    torch.optim.SGD([learned.dt_logit], lr=0.1).step()
    assert learned.dt != before


@pytest.mark.parametrize("build, message", [
    (lambda: Recurrent(TauGRU(1, 2, tau=3.0), "euler", 1.0, learn_dt=True, dt_max=2.0), "delay system"),
    (lambda: Recurrent(LEM(1, 2), "imex", 1.0, learn_dt=True), "dt_max"),
])
def test_a_learned_step_is_refused_where_it_cannot_work(build, message):
    with pytest.raises(ValueError, match=message):
        build()
