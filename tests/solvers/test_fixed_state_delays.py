"""State-dependent delays under fixed-step explicit Runge–Kutta schemes: each stage reads the cubic Hermite
interpolant of the stored nodes at its own delayed time, per sample. References: the closed form of
y' = −y(t − τ), τ = c + y/2 from the history 1 (``test_tracking.closed_form``), central differences of the
solve itself for its gradient, and the error cases."""
import math

import pytest
import torch

import odelab
from test_tracking import Feedback, closed_form

F64 = torch.float64
T = torch.linspace(0.0, 1.4, 15, dtype=F64)


def errors(method: str, y0: torch.Tensor, steps=(0.1, 0.05, 0.025, 0.0125), **options) -> torch.Tensor:
    """Max error over T against the closed form, per step size (rows) and sample (columns)."""
    exact, _ = closed_form(T, y0, 1.0)
    return torch.stack([(odelab.solve(Feedback(), y0.unsqueeze(1), T, method=method, dt=dt, history=1.0,
                                      **options).y[..., 0] - exact).abs().max(1).values for dt in steps])


@pytest.mark.parametrize("method, order", [("rk4", 4), ("midpoint", 2), ("euler", 1)])
def test_the_schemes_order_holds_where_the_kink_falls_on_the_grid(method, order):
    """y0 = φ(t0) = 1: y'' jumps at ξ1 = 1, a node of every grid here, and y is smooth on either side; the delayed
    reads interpolate (cubic Hermite) at t − τ(y), so the scheme keeps its order (rk4: 4, the Hermite's own)."""
    e = errors(method, torch.tensor([1.0], dtype=F64))[:, 0]
    rates = torch.log2(e[:-1] / e[1:])
    assert float(rates.min()) > order - 0.1 and float(rates.max()) < order + 0.1, rates
    if method == "rk4":
        assert float(e[-1]) < 1e-10


def test_a_jump_of_f_between_nodes_costs_order_one():
    """y0 ≠ φ(t0): f jumps at each sample's ξ1 = (1 + y0/2)/1.5, between nodes; the step straddling it is first
    order accurate, so rk4 converges at order 1 there (the adaptive pairs step onto ξ1 instead)."""
    e = errors("rk4", torch.tensor([0.8, 0.5], dtype=F64))
    rates = torch.log2(e[:-1] / e[1:])
    assert float((rates - 1).abs().max()) < 0.05, rates
    assert float(e[-1].max()) < 1.1e-3


def test_samples_and_callable_histories():
    """A batch gives each sample its values alone (to round-off); a callable history (given a (batch, 1) time
    there) reads as the constant it returns; the dense output interpolates the nodes."""
    y0 = torch.tensor([[1.0], [0.6], [0.3]], dtype=F64)
    batch = odelab.solve(Feedback(), y0, T, method="rk4", dt=0.05, history=1.0)
    for b in range(3):
        alone = odelab.solve(Feedback(), y0[b:b + 1], T, method="rk4", dt=0.05, history=1.0)
        torch.testing.assert_close(batch.y[b], alone.y[0], rtol=0, atol=1e-14)
    shapes = []

    def phi(t):
        shapes.append(tuple(t.shape))
        return torch.ones(t.shape[0], 1, dtype=F64) if t.dim() == 2 else torch.ones(1, dtype=F64)

    called = odelab.solve(Feedback(), y0, T, method="rk4", dt=0.05, history=phi, dense=True)
    torch.testing.assert_close(called.y, batch.y, rtol=0, atol=1e-14)
    assert (3, 1) in shapes
    exact, _ = closed_form(torch.tensor([0.3, 1.1], dtype=F64), torch.tensor([1.0], dtype=F64), 1.0)
    assert float((called.evaluate(torch.tensor([0.3, 1.1], dtype=F64))[0][0, :, 0] - exact[0]).abs().max()) < 1e-6


def test_gradients_match_central_differences_of_the_solve():
    """d/dc and d/dy0 of Σ y(t_k) through the delayed times (the Hermite weights move with τ) against central
    differences of the same fixed-step solve (y0 = 1 = φ(t0): the solve is a smooth function of both)."""
    def total(c, y0):
        return odelab.solve(Feedback(c), y0.reshape(1, 1), T, method="rk4", dt=0.05, history=1.0).y.sum()

    c, y0 = torch.tensor(0.95, dtype=F64, requires_grad=True), torch.tensor(1.0, dtype=F64, requires_grad=True)
    got = torch.autograd.grad(total(c, y0), (c, y0))
    eps = 1e-6
    with torch.no_grad():
        want = ((total(c + eps, y0) - total(c - eps, y0)) / (2 * eps),
                (total(c, y0 + eps) - total(c, y0 - eps)) / (2 * eps))
    for g, w in zip(got, want):
        assert abs(float(g) - float(w)) < 1e-6 * max(1.0, abs(float(w))), (got, want)


def test_a_clamped_delay_warns_once():
    """τ = c + y/2 with c = 1.2 exceeds the upper bound 1.5 while y > 0.6: read at 1.5 there, one warning."""
    with pytest.warns(RuntimeWarning, match=r"clamped onto them along 1 sample\(s\) \(0\)") as caught:
        odelab.solve(Feedback(1.2), torch.ones(1, 1, dtype=F64), T, method="rk4", dt=0.05, history=1.0)
    assert len(caught) == 1 and caught[0].filename == __file__


def test_the_errors():
    y0 = torch.ones(1, 1, dtype=F64)
    with pytest.raises(ValueError, match=r"dt <= the smallest delay 0.5"):
        odelab.solve(Feedback(), y0, [0.0, 1.0], method="rk4", dt=0.6)
    with pytest.raises(ValueError, match="explicit Runge–Kutta schemes, not 'imex'"):
        odelab.solve(Feedback(), y0, [0.0, 1.0], method="imex", dt=0.1)
    with pytest.raises(ValueError, match="compile=True"):
        odelab.solve(Feedback(), y0, [0.0, 1.0], method="rk4", dt=0.1, compile=True)
    with pytest.raises(ValueError, match="state-dependent delay"):
        odelab.solve(Feedback(), y0, [0.0, 1.0], method="rk4", dt=0.1, adjoint="checkpoint")
    assert math.isfinite(float(odelab.solve(Feedback(), y0, [0.0, 1.0], method="rk4", dt=0.5).y[0, -1, 0]))
