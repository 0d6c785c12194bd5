"""odelab.interop.torchdiffeq_func: a system solved by torchdiffeq.odeint (tuple state) agrees with odelab.solve."""
import pytest
import torch
import torchdiffeq

from odelab import solve
from odelab.interop import torchdiffeq_func
from odelab.systems import LEM, CoRNN, LRC


def test_cornn_with_constant_input_agrees_with_odelab_solve():
    torch.manual_seed(0)
    system = CoRNN(2, 5, gamma=1.0, epsilon=0.5).double()
    u = torch.randn(3, 2, dtype=torch.float64)
    y0 = tuple(0.5 * torch.randn(3, 5, dtype=torch.float64) for _ in system.blocks)
    t = torch.linspace(0, 3, 7, dtype=torch.float64)
    ours = solve(system, y0, t, u=lambda _t: u, method="rk4", dt=1e-2)
    theirs = torchdiffeq.odeint(torchdiffeq_func(system, u), y0, t, method="dopri5", rtol=1e-10, atol=1e-12)
    for block, ys in enumerate(ours.ys):
        assert (ys - theirs[block].transpose(0, 1)).abs().max() < 1e-7  # rk4 error at dt = 1e-2 is ~1e-9


def test_time_dependent_input_and_gradients_through_odeint():
    torch.manual_seed(1)
    system = LRC(1, 3, "symmetric").double()
    func = torchdiffeq_func(system, lambda t: torch.sin(t).expand(2, 1))
    y0 = (torch.zeros(2, 3, dtype=torch.float64),)
    t = torch.linspace(0, 2, 5, dtype=torch.float64)
    (ys,) = torchdiffeq.odeint(func, y0, t, method="rk4", options={"step_size": 0.01})
    ys.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in system.parameters())
    reference = solve(system, y0, t, u=lambda s: torch.sin(torch.as_tensor(s, dtype=torch.float64)).expand(2, 1),
                      method="rk4", dt=0.01)
    assert (reference.ys[0] - ys.detach().transpose(0, 1)).abs().max() < 1e-10


def test_adjoint_finds_the_parameters():
    torch.manual_seed(2)
    system = LEM(1, 3).double()
    func = torchdiffeq_func(system, torch.ones(2, 1, dtype=torch.float64))
    assert {id(p) for p in func.parameters()} == {id(p) for p in system.parameters()}
    y0 = tuple(torch.randn(2, 3, dtype=torch.float64) for _ in system.blocks)
    ys = torchdiffeq.odeint_adjoint(func, y0, torch.tensor([0.0, 0.5], dtype=torch.float64), method="rk4",
                                    options={"step_size": 0.05})
    sum(y[-1].sum() for y in ys).backward()
    assert system.W2.grad is not None and system.W2.grad.abs().max() > 0


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="u"):
        torchdiffeq_func(CoRNN(2, 3))
    with pytest.raises(ValueError, match="u"):
        torchdiffeq_func(CoRNN(2, 3), torch.zeros(4, 3))
    with pytest.raises(TypeError, match="system"):
        torchdiffeq_func(lambda t, y: y)
