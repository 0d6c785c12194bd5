"""Classical systems against their equations, eager and under torch.compile (FitzHugh–Nagumo has an elementwise
form for compiled solver steps beside its three-kernel eager form)."""
import pytest
import torch

from odelab.systems import FitzHughNagumo


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
