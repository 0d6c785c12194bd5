"""The neural oscillator (Lanthaler, Rusch & Mishra, NeurIPS 2023; thesis ch. 4), the universal form

    ÿ = σ(W y + V u + b),   y(0) = ẏ(0) = 0,   output A y + c                          (4.1a–c)

with σ smooth, σ(0) = 0, σ'(0) = 1 (tanh here). As a first-order system: y' = z, z' = σ(W y + V u + b).
The readout A y + c (4.1c) is the model's output layer and not part of the field.

Special cases (thesis §4.1.1):
* forced harmonic oscillator (4.6): σ = id, W = −ω², V = 1, b = 0;
* coRNN (2.1) with 𝒲 = 0 and γ = ε = 0 is (4.1) -- :class:`odelab.systems.CoRNN` adds damping and the
  restoring term −γ y outside σ;
* multi-layer UnICORNN (3.6) with α = 0 is the multi-layer oscillator (4.2), a block-bidiagonal W
  (diagonal blocks w^ℓ I, super-diagonal V^ℓ, 4.3) with sign-flipped parameters (tanh is odd).
The preset steps it with symplectic Euler (z then y), which preserves the Hamiltonian structure (4.4–4.5).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .base import System


class NeuralOscillator(System):
    """Neural oscillator vector field (thesis eq. 4.1a); state ``(z, y)`` with z = ẏ, observable y.

    Storage ``weight`` = [V | W] acting on cat(u, y) and ``bias`` = b, initialised like one nn.Linear over
    cat(u, y): U(−1/√(m + d), 1/√(m + d)) (the paper gives no initialisation; our choice).
    """

    blocks = ("z", "y")
    observable = "y"
    velocity_position = ("z", "y")

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        self.weight = nn.Parameter(torch.empty(hidden_size, input_size + hidden_size))
        self.bias = nn.Parameter(torch.empty(hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.init_uniform_(1.0 / math.sqrt(self.weight.shape[1]), (self.weight, self.bias))  # as nn.Linear

    def symbols(self) -> dict[str, Tensor]:
        V, W = self.weight.split((self.input_size, self.hidden_size), dim=1)
        return {"W": W, "V": V, "b": self.bias}

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.weight[:, : self.input_size], self.bias

    def block_derivative(self, i, t, state, inp, *delayed):
        z, y = state
        if i == 1:  # y' = z
            return z
        if inp is None:  # autonomous use: the encoding of a zero input is the bias
            inp = self.bias
        return torch.tanh(F.linear(y, self.weight[:, self.input_size:]) + inp)  # z' = σ(W y + V u + b)

    def derivative(self, t, state, inp, *delayed):
        return self.block_derivative(0, t, state, inp), state[0]
