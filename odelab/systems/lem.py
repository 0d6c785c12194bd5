"""LEM: Long Expressive Memory (Rusch, Mishra, Erichson, Mahoney, ICLR 2022), the multiscale ODE (eq. 2).

    dy/dt = σ̂(W2 y + V2 u + b2) ⊙ (tanh(Wy z + Vy u + by) − y)        (2, y)
    dz/dt = σ̂(W1 y + V1 u + b1) ⊙ (tanh(Wz y + Vz u + bz) − z)        (2, z)

with σ̂(x) = 0.5 (1 + tanh(x/2)) the sigmoid. Both gates read y and u only. The published cell (eq. 3) is the
partitioned ("IMEX") Euler step of this field: z first from (z_{n−1}, y_{n−1}, u_n), then y from
(y_{n−1}, z_n, u_n), both decays explicit -- ``Recurrent(LEM(...), "imex", dt)``; its multiscale steps are
Δt_n = Δt σ̂(W1 y + V1 u + b1) (z) and Δt̄_n = Δt σ̂(W2 y + V2 u + b2) (y).
The two-scale ODE (eq. 1) is the special case W1 = W2 = V1 = V2 = 0 with constant biases σ̂(b1) = τ_z,
σ̂(b2) = τ_y (:meth:`LEM.two_scale`). The paper's ablations (App. B): :class:`SingleScaleLEM` (Table 9, gates ≡ 1),
``min_gate`` (Fig. 6, gates clipped from below), ``chrono_horizon`` (Table 10, chrono initialisation).
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

    Initialisation as the official code: every weight and bias U(−1/√d, 1/√d). The paper's eq. 3 has one bias
    per pre-activation (4d, the default). ``official_bias=True`` is the official cell's layout: a second bias
    vector ``bias_state`` (its nn.Linear layers on y and z carry one each), added to ``bias`` -- 4d² + 4dm + 8d
    parameters, nn.LSTM's count (Tables 1–7: 1233 with FitzHugh–Nagumo's readout), and under Adam each of the two
    moves at the learning rate, so the effective bias moves up to twice as fast as with one vector.

    Ablations (App. B): ``min_gate`` clips both gates from below, σ̂ ↦ max(σ̂, min_gate) (Fig. 6 clips the steps
    Δt σ̂ to [2^−i, 1] with Δt = 1: ``min_gate = 2**-i``; the fused kernels compute the unclipped cell, so a
    clipped LEM runs the generic loop); ``chrono_horizon`` = T_max Δt > 2 draws the chrono initialisation
    (Table 10): every bias 0 except b1 = −log U, U ~ U[1, T_max Δt − 1], so that σ̂(b1) = 1 / (1 + U) spreads
    the z-steps over [1/(T_max Δt), 1/2].
    """

    blocks = ("z", "y")
    observable = "y"
    split_blocks = ("z", "y")

    def __init__(self, input_size: int, hidden_size: int, *, official_bias: bool = False, min_gate: float = 0.0,
                 chrono_horizon: float | None = None):
        super().__init__()
        if not isinstance(min_gate, (int, float)) or not 0.0 <= min_gate <= 1.0:
            raise ValueError(f"min_gate: expected a number in [0, 1], got {min_gate!r}")
        if chrono_horizon is not None and (not isinstance(chrono_horizon, (int, float))
                                           or not math.isfinite(chrono_horizon) or chrono_horizon <= 2.0):
            raise ValueError(f"chrono_horizon: expected T_max·Δt > 2 (U[1, T_max·Δt − 1] must not be empty), "
                             f"got {chrono_horizon!r}")
        self.set_sizes(input_size, hidden_size)
        d, m = hidden_size, input_size
        self.weight_y = nn.Parameter(torch.empty(2 * d, d))
        self.W2 = nn.Parameter(torch.empty(d, d))
        self.Wy = nn.Parameter(torch.empty(d, d))
        self.weight_input = nn.Parameter(torch.empty(4 * d, m))
        self.bias = nn.Parameter(torch.empty(4 * d))
        self.bias_state = nn.Parameter(torch.empty(4 * d)) if official_bias else None
        self.min_gate, self.chrono_horizon = float(min_gate), chrono_horizon
        self.reset_parameters()

    @property
    def official_bias(self) -> bool:
        return self.bias_state is not None

    def reset_parameters(self) -> None:
        self.init_uniform_(1.0 / math.sqrt(self.hidden_size))
        if self.chrono_horizon is not None:
            with torch.no_grad():
                for b in (self.bias, self.bias_state):
                    if b is not None:
                        b.zero_()
                d = self.hidden_size
                self.bias[:d] = -torch.empty(d).uniform_(1.0, self.chrono_horizon - 1.0).log()

    @classmethod
    def two_scale(cls, input_size: int, hidden_size: int, tau_z: float, tau_y: float) -> "LEM":
        """The two-scale ODE (eq. 1) as a LEM: W1 = W2 = V1 = V2 = 0, σ̂(b1) = τ_z, σ̂(b2) = τ_y (0 < τ < 1),
        the other weights as initialised; train it as is, or freeze the gates to keep the two scales."""
        for name, tau in (("tau_z", tau_z), ("tau_y", tau_y)):
            if not isinstance(tau, (int, float)) or not 0.0 < tau < 1.0:
                raise ValueError(f"{name}: expected a time scale in (0, 1) (σ̂(b) = τ), got {tau!r}")
        system = cls(input_size, hidden_size)
        s = system.symbols()
        with torch.no_grad():
            for name in ("W1", "W2", "V1", "V2"):
                s[name].zero_()
            s["b1"].fill_(math.log(tau_z / (1.0 - tau_z)))
            s["b2"].fill_(math.log(tau_y / (1.0 - tau_y)))
        return system

    def kernel_blocker(self) -> str | None:
        return "min_gate clips the gates, the kernels compute the unclipped cell" if self.min_gate > 0 else None

    def input_bias(self) -> Tensor:
        """[b1; bz; b2; by], the sum of both vectors in the official layout."""
        return self.bias if self.bias_state is None else self.bias + self.bias_state

    def symbols(self) -> dict[str, Tensor]:
        d = self.hidden_size
        W1, Wz = (self.weight_y[k * d:(k + 1) * d] for k in range(2))  # slices: single views, writable in place
        V1, Vz, V2, Vy = (self.weight_input[k * d:(k + 1) * d] for k in range(4))
        bias = self.input_bias()  # ``bias`` itself (its slices writable in place) unless official_bias
        b1, bz, b2, by = (bias[k * d:(k + 1) * d] for k in range(4))
        return dict(W1=W1, W2=self.W2, Wz=Wz, Wy=self.Wy, V1=V1, V2=V2, Vz=Vz, Vy=Vy, b1=b1, b2=b2, bz=bz, by=by)

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.weight_input, self.input_bias()

    def _inputs(self, inp: Tensor | None, batch_like: Tensor) -> tuple[Tensor, Tensor]:
        if inp is None:  # autonomous use (no input signal): the encoding is the bias alone
            inp = self.input_bias().expand(batch_like.shape[0], -1)
        d2 = 2 * self.hidden_size
        return inp[..., :d2], inp[..., d2:]

    def _clip(self, gate: Tensor) -> Tensor:
        return gate.clamp(min=self.min_gate) if self.min_gate > 0 else gate

    def split(self, i, t, state, inp, *delayed):
        z, y = state
        for_z, for_y = self._inputs(inp, y)
        if i == 0:  # z: forcing σ̂(W1 y + V1 u + b1) ⊙ tanh(Wz y + Vz u + bz), decay σ̂(W1 y + V1 u + b1)
            gate, target = (F.linear(y, self.weight_y) + for_z).chunk(2, dim=-1)
        else:  # y: forcing σ̂(W2 y + V2 u + b2) ⊙ tanh(Wy z + Vy u + by), decay σ̂(W2 y + V2 u + b2)
            gate_in, target_in = for_y.chunk(2, dim=-1)
            gate = F.linear(y, self.W2) + gate_in
            target = F.linear(z, self.Wy) + target_in
        gate = self._clip(torch.sigmoid(gate))
        return gate * torch.tanh(target), gate

    def derivative(self, t, state, inp, *delayed):
        return tuple(self.block_derivative(i, t, state, inp) for i in range(2))


class SingleScaleLEM(System):
    """LEM without multiscale steps (Rusch et al. 2022, Table 9, "LEM w/o multi-scale"): both gates ≡ 1, so the
    cell's steps are Δt_n = Δt̄_n = Δt 1 and only the scalar Δt is tuned -- a leaky two-stage tanh RNN:

        dz/dt = tanh(Wz y + Vz u + bz) − z,        dy/dt = tanh(Wy z + Vy u + by) − y.

    State ``(z, y)``, observable ``y``; ``weight_input`` = [Vz; Vy], ``bias`` = [bz; by]; every weight and
    bias U(−1/√d, 1/√d) (the gates' parameters are absent: 2d² + 2dm + 2d parameters)."""

    blocks = ("z", "y")
    observable = "y"
    split_blocks = ("z", "y")

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        d, m = hidden_size, input_size
        self.Wz = nn.Parameter(torch.empty(d, d))
        self.Wy = nn.Parameter(torch.empty(d, d))
        self.weight_input = nn.Parameter(torch.empty(2 * d, m))
        self.bias = nn.Parameter(torch.empty(2 * d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.init_uniform_(1.0 / math.sqrt(self.hidden_size))

    def symbols(self) -> dict[str, Tensor]:
        d = self.hidden_size
        Vz, Vy = self.weight_input.split(d)
        bz, by = self.bias.split(d)
        return dict(Wz=self.Wz, Wy=self.Wy, Vz=Vz, Vy=Vy, bz=bz, by=by)

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.weight_input, self.bias

    def split(self, i, t, state, inp, *delayed):
        z, y = state
        if inp is None:
            inp = self.bias.expand(y.shape[0], -1)
        for_z, for_y = inp.chunk(2, dim=-1)
        target = F.linear(y, self.Wz) + for_z if i == 0 else F.linear(z, self.Wy) + for_y
        return torch.tanh(target), target.new_ones(())

    def derivative(self, t, state, inp, *delayed):
        return tuple(self.block_derivative(i, t, state, inp) for i in range(2))
