"""UnICORNN: undamped independent controlled oscillatory RNN (Rusch & Mishra, ICML 2021; thesis ch. 3).

One layer is the time-dependent Hamiltonian system of uncoupled driven oscillators

    y'' = −[tanh(w ⊙ y + V u + b) + α y]                                              (3.1)
    y' = z,   z' = −[tanh(w ⊙ y + V u + b) + α y]                                      (3.2)

and the published layer (3.6) is symplectic Euler (z first, then y with the new z) with the per-neuron step
Δt·σ̂(c), σ̂ the logistic sigmoid:

    z_n = z_{n−1} − Δt σ̂(c) ⊙ [tanh(w ⊙ y_{n−1} + V u_n + b) + α y_{n−1}]              (3.6, z)
    y_n = y_{n−1} + Δt σ̂(c) ⊙ z_n                                                      (3.6, y)

Here the per-neuron time scale is put into the vector field: both derivatives of (3.2) are multiplied by
σ̂(c) (a per-neuron reparametrisation of time), so that ``Recurrent(UnICORNN(...), "symplectic-euler", dt)``
is exactly (3.6). The step is exactly invertible (3.7):

    y_{n−1} = y_n − Δt σ̂(c) ⊙ z_n,   z_{n−1} = z_n + Δt σ̂(c) ⊙ [tanh(w ⊙ y_{n−1} + V u_n + b) + α y_{n−1}]

which the memory-saving backward of :mod:`odelab.unicornn` uses. Stacked layers (3.6: layer ℓ driven by
layer ℓ−1's current y) live in :class:`odelab.unicornn.UnICORNNStack`.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import System


class UnICORNN(System):
    """One UnICORNN layer as a vector field (thesis eq. 3.2 with time scale σ̂(c)); state ``(z, y)``.

    Parameters (official initialisation): ``w`` (recurrent weight vector) ~ U(0, 1), ``c`` (time-scale
    logits) ~ U(−0.1, 0.1), ``weight_input`` = V Kaiming-uniform (a = 8, fan_in), ``bias`` = b = 0.
    α (``alpha``) is a fixed float (a hyperparameter, as in the official code).
    """

    blocks = ("z", "y")
    observable = "y"
    velocity_position = ("z", "y")

    def __init__(self, input_size: int, hidden_size: int, alpha: float = 0.0):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha: expected a finite number >= 0, got {alpha!r}")
        self.alpha = float(alpha)
        self.w = nn.Parameter(torch.empty(hidden_size))
        self.c = nn.Parameter(torch.empty(hidden_size))
        self.weight_input = nn.Parameter(torch.empty(hidden_size, input_size))
        self.bias = nn.Parameter(torch.empty(hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.w.uniform_(0.0, 1.0)
            self.c.uniform_(-0.1, 0.1)
            if self.input_size:
                nn.init.kaiming_uniform_(self.weight_input, a=8, mode="fan_in")
            self.bias.zero_()

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}, alpha={self.alpha:g}"

    def symbols(self) -> dict[str, Tensor]:
        return {"w": self.w, "V": self.weight_input, "b": self.bias, "c": self.c}

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.weight_input, self.bias

    def block_derivative(self, i, t, state, inp, *delayed):
        z, y = state
        scale = torch.sigmoid(self.c)  # σ̂(c): per-neuron time scale
        if i == 1:  # y' = σ̂(c) z
            return scale * z
        if inp is None:  # autonomous use: the encoding of a zero input is the bias
            inp = self.bias
        return -scale * (torch.tanh(self.w * y + inp) + self.alpha * y)  # z' = −σ̂(c)[tanh(w y + V u + b) + α y]

    def derivative(self, t, state, inp, *delayed):
        return self.block_derivative(0, t, state, inp), self.block_derivative(1, t, state, inp)
