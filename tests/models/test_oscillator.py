"""Neural oscillator (thesis eq. 4.1): the generic cell (field + symplectic Euler + Δt) against an independent
symplectic-Euler loop of ÿ = σ(W y + V u + b); the forced harmonic oscillator special case (4.6)/(4.10)."""
import math

import pytest
import torch

from odelab import cells, solve
from odelab.systems import NeuralOscillator

BATCH, STEPS, INPUTS, HIDDEN = 4, 30, 3, 6


def reference_oscillator(x, W, V, b, dt):
    """Symplectic Euler of y' = z, z' = tanh(W y + V u + b): z first with u_n, then y with the new z."""
    z = torch.zeros(x.shape[0], W.shape[0], dtype=x.dtype)
    y = torch.zeros_like(z)
    outputs = []
    for n in range(x.shape[1]):
        z = z + dt * torch.tanh(y @ W.T + x[:, n] @ V.T + b)
        y = y + dt * z
        outputs.append(y)
    return torch.stack(outputs, dim=1), (z, y)


def test_cell_matches_symplectic_euler_of_eq_4_1():
    torch.manual_seed(0)
    model = cells.NeuralOscillator(INPUTS, HIDDEN, dt=0.05)  # |y| <= t²/2 stays O(1)
    system = model.system
    x = torch.randn(BATCH, STEPS, INPUTS)
    weights = torch.randn(BATCH, STEPS, HIDDEN) / STEPS
    out, (z, y) = model(x)
    ((out * weights).sum() + z.mean()).backward()

    s = {k: v.detach().clone().requires_grad_() for k, v in system.symbols().items()}
    ref, (rz, ry) = reference_oscillator(x, s["W"], s["V"], s["b"], 0.05)
    ((ref * weights).sum() + rz.mean()).backward()

    assert (out - ref).abs().max() <= 1e-6 and (z - rz).abs().max() <= 1e-6
    grad = system.weight.grad
    assert (grad[:, :INPUTS] - s["V"].grad).abs().max() <= 1e-6
    assert (grad[:, INPUTS:] - s["W"].grad).abs().max() <= 1e-6
    assert (system.bias.grad - s["b"].grad).abs().max() <= 1e-6


def test_small_amplitude_limit_is_the_forced_harmonic_oscillator():
    """Eq. 4.6/4.10: with W = −ω², V = s, b = 0 and a small input scale s, y/s solves ÿ = −ω² y + u, whose
    solution from rest is y(t) = (1/ω) ∫_0^t u(t − τ) sin(ωτ) dτ; for u ≡ 1 that is (1 − cos ωt)/ω²."""
    omega, scale = 1.5, 1e-4
    system = NeuralOscillator(1, 1).double()
    with torch.no_grad():
        system.symbols()["W"].fill_(-omega**2)
        system.symbols()["V"].fill_(scale)
        system.bias.zero_()
    t = torch.linspace(0, 4, 9, dtype=torch.float64)
    y0 = system.initial_state(1, dtype=torch.float64)
    sol = solve(system, y0, t, u=lambda _t: torch.ones(1, 1, dtype=torch.float64), method="rk4", dt=1e-3)
    exact = (1 - torch.cos(omega * t)) / omega**2
    assert (sol.ys[1][0, :, 0] / scale - exact).abs().max() < 1e-6


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="hidden_size"):
        NeuralOscillator(1, 0)
    with pytest.raises(ValueError, match="input_size"):
        NeuralOscillator(-1, 2)


def test_symbols_are_views():
    system = NeuralOscillator(2, 3)
    with torch.no_grad():
        system.symbols()["b"].fill_(math.pi)
    assert torch.all(system.bias == math.pi)
