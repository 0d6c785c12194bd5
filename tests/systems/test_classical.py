"""Classical systems against their equations, eager and under torch.compile (FitzHugh–Nagumo has an elementwise
form for compiled solver steps beside its three-kernel eager form)."""
import pytest
import torch

import odelab
from odelab.systems import ENSO, FitzHughNagumo


def fitzhugh_nagumo_rhs(v, w, tau=0.02, current=0.5, a=0.7, b=0.8):
    """Rusch et al. 2022, §5.5: v' = v − v³/3 − w + I, w' = τ (v + a − b w)."""
    return torch.stack((v - v**3 / 3 - w + current, tau * (v + a - b * w)), -1)


@pytest.mark.parametrize("compiled", [False, True])
def test_fitzhugh_nagumo_derivative(compiled):
    system = FitzHughNagumo(tau=0.05, current=0.3, a=0.6, b=0.9)
    x = torch.randn(7, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    derivative = torch.compile(system.derivative, dynamic=True) if compiled else system.derivative
    (out,) = derivative(0.0, (x,))
    expected = fitzhugh_nagumo_rhs(x[:, 0], x[:, 1], tau=0.05, current=0.3, a=0.6, b=0.9)
    assert out.shape == (7, 2)
    assert (out - expected).abs().max().item() <= 1e-14


def test_enso_limit_cycle_period_and_amplitude():
    """The τ-GRU paper (001 §5): every T0 settles on a periodic orbit with T ∈ [−1.166, 1.166] and a period of about
    26.1 time units. dopri5 at rtol 1e-9 on [0, 400], read densely on [200, 400] every 0.01; the period is the mean
    spacing of the upward zero crossings (each located linearly between two readings): 26.111, amplitude 1.1659."""
    sol = odelab.solve(ENSO(), torch.tensor([[0.3], [0.8]], dtype=torch.float64), [0.0, 400.0], rtol=1e-9,
                       atol=1e-11, dense=True)
    t = torch.linspace(200, 400, 20001, dtype=torch.float64)
    values = sol.evaluate(t)[0][..., 0]
    for x in values:
        up = ((x[:-1] < 0) & (x[1:] >= 0)).nonzero().flatten()
        crossings = t[up] - x[up] * (t[up + 1] - t[up]) / (x[up + 1] - x[up])
        assert len(crossings) >= 6
        assert abs(float((crossings[1:] - crossings[:-1]).mean()) - 26.1) < 0.05
        assert abs(float(x.abs().max()) - 1.166) < 0.002
