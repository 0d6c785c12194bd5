"""coRNN: coupled oscillatory RNN (Rusch & Mishra, ICLR 2021; thesis ch. 2), the damped driven oscillator.

    y'' = tanh(W y + 𝒲 y' + V u + b) − γ y − ε y'                                      (2.1)
    y'  = z                                                                            (2.2, y)
    z'  = tanh(W y + 𝒲 z + V u + b) − γ y − ε z                                        (2.2, z)

The published cell (2.3) is one partitioned step of (2.2), z first from (y_{n−1}, z_{n−1}, u_n), then
y_n = y_{n−1} + Δt z_n with the new z:

    z_n = z_{n−1} + Δt tanh(W y_{n−1} + 𝒲 z_{n−1} + V u_n + b) − Δt γ y_{n−1} − Δt ε z_{n̄}      (2.3)

with explicit damping n̄ = n−1 (the official code and all experiments; (2.45)) -- ``Recurrent(CoRNN(...),
"imex", dt)`` -- or implicit damping n̄ = n, z_n = (z_{n−1} + Δt tanh(·) − Δt γ y_{n−1}) / (1 + Δt ε) --
``Recurrent(CoRNN(...), "imex-implicit", dt)`` on the same system. The z-block splits as
forcing = tanh(W y + 𝒲 z + V u + b) − γ y, decay = ε.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .base import System


class CoRNN(System):
    """coRNN vector field (thesis eq. 2.2); state ``(z, y)`` (velocity first, the update order), observable y.

    Storage as the official ``i2h = nn.Linear(n_inp + 2 n_hid, n_hid)`` over ``cat(u, z, y)``: ``weight`` =
    [V | 𝒲 | W] and ``bias`` = b, initialised like that Linear, U(−1/√(m + 2d), 1/√(m + 2d)) for every entry.
    ``encode(u) = V u + b`` for the whole sequence in one matmul.

    γ (``gamma``) and ε (``epsilon``) are fixed positive floats by default (official code). With
    ``learn_coefficients=True`` they become scalar parameters used through ReLU (thesis, training details:
    "ε, γ > 0 via ReLU").
    """

    blocks = ("z", "y")
    observable = "y"
    split_blocks = ("z",)
    velocity_position = ("z", "y")

    def __init__(self, input_size: int, hidden_size: int, gamma: float = 1.0, epsilon: float = 1.0, *,
                 learn_coefficients: bool = False):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        for name, value in (("gamma", gamma), ("epsilon", epsilon)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        self.weight = nn.Parameter(torch.empty(hidden_size, input_size + 2 * hidden_size))
        self.bias = nn.Parameter(torch.empty(hidden_size))
        self.learn_coefficients = learn_coefficients
        coefficients = torch.tensor([float(gamma), float(epsilon)])
        if learn_coefficients:
            self.coefficients = nn.Parameter(coefficients)
        else:
            self.register_buffer("coefficients", coefficients)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.init_uniform_(1.0 / math.sqrt(self.weight.shape[1]), (self.weight, self.bias))  # as nn.Linear

    def extra_repr(self) -> str:
        gamma, epsilon = self.coefficients.tolist()
        return (f"input_size={self.input_size}, hidden_size={self.hidden_size}, gamma={gamma:g}, "
                f"epsilon={epsilon:g}, learn_coefficients={self.learn_coefficients}")

    def symbols(self) -> dict[str, Tensor]:
        m, d = self.input_size, self.hidden_size
        V, Wc, W = self.weight.split((m, d, d), dim=1)
        gamma, epsilon = self.coefficients.unbind()
        return {"W": W, "𝒲": Wc, "V": V, "b": self.bias, "γ": gamma, "ε": epsilon}

    def gamma_epsilon(self) -> tuple[Tensor, Tensor]:
        """(γ, ε) as used by the field (ReLU of the stored values when they are learned)."""
        coefficients = F.relu(self.coefficients) if self.learn_coefficients else self.coefficients
        return coefficients[0], coefficients[1]

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.weight[:, : self.input_size], self.bias

    def _forcing(self, state, inp: Tensor | None) -> Tensor:
        """tanh(W y + 𝒲 z + V u + b) − γ y, the z-forcing of (2.2)."""
        z, y = state
        if inp is None:  # autonomous use: the encoding of a zero input is the bias
            inp = self.bias
        drive = torch.tanh(F.linear(torch.cat((z, y), dim=-1), self.weight[:, self.input_size:]) + inp)
        return drive - self.gamma_epsilon()[0] * y

    def split(self, i, t, state, inp, *delayed):
        if i != 0:
            return super().split(i, t, state, inp)
        return self._forcing(state, inp), self.gamma_epsilon()[1]

    def block_derivative(self, i, t, state, inp, *delayed):
        if i == 1:  # y' = z
            return state[0]
        return self._forcing(state, inp) - self.gamma_epsilon()[1] * state[0]

    def derivative(self, t, state, inp, *delayed):
        return self.block_derivative(0, t, state, inp), state[0]
