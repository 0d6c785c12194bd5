"""LEM: Long Expressive Memory (Rusch, Mishra, Erichson, Mahoney, ICLR 2022), the multiscale ODE (eq. 2).

    dy/dt = σ̂(W2 y + V2 u + b2) ⊙ (tanh(Wy z + Vy u + by) − y)        (2, y)
    dz/dt = σ̂(W1 y + V1 u + b1) ⊙ (tanh(Wz y + Vz u + bz) − z)        (2, z)

with σ̂(x) = 0.5 (1 + tanh(x/2)) the sigmoid. Both gates read y and u only. The published cell (eq. 3) is the
partitioned ("IMEX") Euler step of this field: z first from (z_{n−1}, y_{n−1}, u_n), then y from
(y_{n−1}, z_n, u_n), both decays explicit -- ``Recurrent(LEM(...), "imex", dt)``.
The two-scale ODE (eq. 1) is the special case W1 = W2 = V1 = V2 = 0 with constant biases σ̂(b1) = τ_z,
σ̂(b2) = τ_y.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .base import System


class LEM(System):
    """LEM vector field (Rusch et al. 2022, eq. 2); state ``(z, y)`` in update order, observable ``y``.

    Storage: ``weight_y`` = [W1; Wz] acting on y for the z-equation, ``W2`` (y-gate), ``Wy`` (acting on z),
    ``weight_input`` = [V1; Vz; V2; Vy] and ``bias`` = [b1; bz; b2; by], so that the encoded input
    ``encode(u) = [V1 u + b1, Vz u + bz, V2 u + b2, Vy u + by]`` is one matmul for the whole sequence.

    Initialisation as the official code: every weight and bias U(−1/√d, 1/√d). The official cell keeps two
    bias vectors per pre-activation (nn.Linear on input and on state); ``official_bias=True`` draws each
    b as the sum of two such uniforms, which is the distribution of that effective bias (the paper's eq. 3
    has one bias per pre-activation, the default here).
    """

    blocks = ("z", "y")
    observable = "y"
    split_blocks = ("z", "y")

    def __init__(self, input_size: int, hidden_size: int, *, official_bias: bool = False):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        d, m = hidden_size, input_size
        self.weight_y = nn.Parameter(torch.empty(2 * d, d))
        self.W2 = nn.Parameter(torch.empty(d, d))
        self.Wy = nn.Parameter(torch.empty(d, d))
        self.weight_input = nn.Parameter(torch.empty(4 * d, m))
        self.bias = nn.Parameter(torch.empty(4 * d))
        self.official_bias = official_bias
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.init_uniform_(1.0 / math.sqrt(self.hidden_size), doubled=self.bias if self.official_bias else None)

    def symbols(self) -> dict[str, Tensor]:
        d = self.hidden_size
        W1, Wz = (self.weight_y[k * d:(k + 1) * d] for k in range(2))  # slices: single views, writable in place
        V1, Vz, V2, Vy = (self.weight_input[k * d:(k + 1) * d] for k in range(4))
        b1, bz, b2, by = (self.bias[k * d:(k + 1) * d] for k in range(4))
        return dict(W1=W1, W2=self.W2, Wz=Wz, Wy=self.Wy, V1=V1, V2=V2, Vz=Vz, Vy=Vy, b1=b1, b2=b2, bz=bz, by=by)

    def encode(self, u: Tensor) -> Tensor:
        return F.linear(u, self.weight_input, self.bias)

    def _inputs(self, inp: Tensor | None, batch_like: Tensor) -> tuple[Tensor, Tensor]:
        if inp is None:  # autonomous use (no input signal): the encoding is the bias alone
            inp = self.bias.expand(batch_like.shape[0], -1)
        d2 = 2 * self.hidden_size
        return inp[..., :d2], inp[..., d2:]

    def split(self, i, t, state, inp, *delayed):
        z, y = state
        for_z, for_y = self._inputs(inp, y)
        if i == 0:  # z: forcing σ̂(W1 y + V1 u + b1) ⊙ tanh(Wz y + Vz u + bz), decay σ̂(W1 y + V1 u + b1)
            gate, target = (F.linear(y, self.weight_y) + for_z).chunk(2, dim=-1)
        else:  # y: forcing σ̂(W2 y + V2 u + b2) ⊙ tanh(Wy z + Vy u + by), decay σ̂(W2 y + V2 u + b2)
            gate_in, target_in = for_y.chunk(2, dim=-1)
            gate = F.linear(y, self.W2) + gate_in
            target = F.linear(z, self.Wy) + target_in
        gate = torch.sigmoid(gate)
        return gate * torch.tanh(target), gate

    def derivative(self, t, state, inp, *delayed):
        return tuple(self.block_derivative(i, t, state, inp) for i in range(2))
