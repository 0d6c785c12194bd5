"""Classical dynamical systems (no learnable parameters), same contract as the learnable ones.

Each has one state block ``x`` of shape ``(batch, dim)`` unless noted. Parameters are floats or tensors
broadcastable to ``(batch, 1)`` (a per-sample parameter, e.g. Van der Pol's μ spread over a batch).
"""
from __future__ import annotations

import torch

from .base import System


class _Classical(System):
    blocks = ("x",)
    observable = "x"
    dim = 1

    def block_sizes(self):
        return (self.dim,)


class FitzHughNagumo(_Classical):
    """FitzHugh--Nagumo (Rusch et al. 2022, §5.5):  v' = v − v³/3 − w + I,   w' = τ (v + a − b w).
    State x = (v, w); defaults τ = 0.02, I = 0.5, a = 0.7, b = 0.8."""

    dim = 2

    def __init__(self, tau=0.02, current=0.5, a=0.7, b=0.8):
        super().__init__()
        self.tau, self.current, self.a, self.b = tau, current, a, b
        self._constants = {}

    def _affine(self, x):
        """(Aᵀ, c, k) with (v', w') = x Aᵀ + c + k ⊙ x³: the field in three kernels, cached per dtype/device."""
        key = (x.dtype, x.device)
        if key not in self._constants:
            tau, b = self.tau, self.b
            A = torch.tensor([[1.0, -1.0], [tau, -tau * b]], dtype=x.dtype, device=x.device)
            c = torch.tensor([self.current, tau * self.a], dtype=x.dtype, device=x.device)
            k = torch.tensor([-1.0 / 3.0, 0.0], dtype=x.dtype, device=x.device)
            self._constants[key] = (A.T.contiguous(), c, k)
        return self._constants[key]

    def derivative(self, t, state, inp=None, *delayed):
        x = state[0]
        if torch.compiler.is_compiling():  # elementwise: fuses with a compiled solver's step (addmm would not)
            v, w = x.unbind(-1)
            return (torch.stack((v - v**3 / 3 - w + self.current, self.tau * (v + self.a - self.b * w)), -1),)
        A_T, c, k = self._affine(x)
        return (torch.addmm(c, x, A_T).addcmul_(x.pow(3), k),)


class VanDerPol(_Classical):
    """Van der Pol oscillator:  x' = y,   y' = μ (1 − x²) y − x.  State x = (x, y); μ may be per sample."""

    dim = 2

    def __init__(self, mu=1.0):
        super().__init__()
        self.mu = mu

    def derivative(self, t, state, inp=None, *delayed):
        x, y = state[0].unbind(-1)
        mu = self.mu.reshape(-1) if torch.is_tensor(self.mu) else self.mu
        return (torch.stack((y, mu * (1 - x**2) * y - x), dim=-1),)


class LotkaVolterra(_Classical):
    """Lotka--Volterra predator--prey:  x' = α x − β x y,   y' = δ x y − γ y."""

    dim = 2

    def __init__(self, alpha=1.5, beta=1.0, delta=1.0, gamma=3.0):
        super().__init__()
        self.alpha, self.beta, self.delta, self.gamma = alpha, beta, delta, gamma

    def derivative(self, t, state, inp=None, *delayed):
        x, y = state[0].unbind(-1)
        return (torch.stack((self.alpha * x - self.beta * x * y, self.delta * x * y - self.gamma * y), dim=-1),)


class HarmonicOscillator(System):
    """q'' = −ω² q as the first-order pair  p' = −ω² q,  q' = p  (state (p, q): velocity, position).
    Energy H = p²/2 + ω² q²/2 is conserved; symplectic Euler keeps it bounded."""

    blocks = ("p", "q")
    observable = "q"
    velocity_position = ("p", "q")

    def __init__(self, omega=1.0, dim=1):
        super().__init__()
        self.omega, self.hidden_size = omega, dim

    def derivative(self, t, state, inp=None, *delayed):
        p, q = state
        return (-(self.omega**2) * q, p)

    def block_derivative(self, i, t, state, inp=None, *delayed):
        p, q = state
        return -(self.omega**2) * q if i == 0 else p

    def energy(self, state):
        p, q = state
        return 0.5 * (p**2 + (self.omega**2) * q**2).sum(-1)


class Lorenz63(_Classical):
    """Lorenz (1963), eq. 25--27:  x' = σ (y − x),   y' = x (ρ − z) − y,   z' = x y − β z.
    State x = (x, y, z); defaults σ = 10, ρ = 28, β = 8/3 (chaotic, largest Lyapunov exponent ≈ 0.906)."""

    dim = 3

    def __init__(self, sigma=10.0, rho=28.0, beta=8.0 / 3.0):
        super().__init__()
        self.sigma, self.rho, self.beta = sigma, rho, beta

    def derivative(self, t, state, inp=None, *delayed):
        x, y, z = state[0].split(1, dim=-1)  # (batch, 1) each: a per-sample parameter broadcasts
        return (torch.cat((self.sigma * (y - x), x * (self.rho - z) - y, x * y - self.beta * z), dim=-1),)


class Lorenz96(_Classical):
    """Lorenz (1996), eq. 1:  x_i' = (x_{i+1} − x_{i−2}) x_{i−1} − x_i + F,  i = 1..N, indices cyclic
    (x_{−1} = x_{N−1}, x_0 = x_N, x_{N+1} = x_1).  Defaults N = 40 and F = 8 as in Lorenz & Emanuel (1998)
    and the data-assimilation benchmarks (chaotic, largest Lyapunov exponent ≈ 1.68); N ≥ 4 so that the four
    indices of the stencil are distinct."""

    def __init__(self, dimension=40, forcing=8.0):
        super().__init__()
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 4:
            raise ValueError(f"dimension: expected an integer >= 4, got {dimension!r}")
        self.dim, self.forcing = dimension, forcing

    def derivative(self, t, state, inp=None, *delayed):
        x = state[0]  # torch.roll(x, k)[i] = x[i − k]
        ahead, behind, two_behind = x.roll(-1, -1), x.roll(1, -1), x.roll(2, -1)
        return ((ahead - two_behind) * behind - x + self.forcing,)
