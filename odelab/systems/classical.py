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
