"""The GRU as an ODE (Farsang, Neubauer & Grosu, LRC paper, App. A.2.2, eqs. 53–54).

    h_t = (1 − σ(f_t)) ⊙ h_{t−1} + σ(f_t) ⊙ tanh(u_t)                                   (53)
    dh/dt = σ(f) ⊙ (tanh(u) − h)                                                       (54)

so the GRU is explicit Euler with Δt = 1 of (54): ``Recurrent(GRU(...), "euler", 1.0)``. With
y = [h, x] the update gate is σ(f), f = W_f h + V_f x + b_f, the reset gate σ(r), r = W_r h + V_r x + b_r,
and the candidate ĥ = tanh(u).

Candidate convention: eq. 53 (Cho et al.) resets h before the matmul, u = W_u (σ(r) ⊙ h) + V_u x + b_u
(``reset_after=False``); torch.nn.GRU / cuDNN reset after it, u = σ(r) ⊙ (W_u h + b_hu) + V_u x + b_u
(``reset_after=True``, the default, needed to reproduce torch). torch's update gate z_torch is our
1 − σ(f), i.e. f = −(pre-activation of z_torch): :meth:`GRU.from_torch` negates those rows.
The field splits as forcing = σ(f) ⊙ tanh(u), decay = σ(f) (so the implicit-decay scheme applies too).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .base import System


class GRU(System):
    """GRU vector field (App. A.2.2, eq. 54); one state block ``h``.

    Storage: ``weight_input`` = [V_r; V_f; V_u] and ``bias`` = [b_r; b_f; b_u] (``encode(u)`` is one matmul),
    ``weight_hidden`` = [W_r; W_f; W_u], and with ``reset_after`` ``bias_hidden_candidate`` = b_hu (torch's
    b_hn, inside the reset). Initialised like torch.nn.GRU: U(−1/√d, 1/√d).
    """

    blocks = ("h",)
    observable = "h"
    split_blocks = ("h",)

    def __init__(self, input_size: int, hidden_size: int, *, reset_after: bool = True):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        self.reset_after = reset_after
        d = hidden_size
        self.weight_input = nn.Parameter(torch.empty(3 * d, input_size))
        self.weight_hidden = nn.Parameter(torch.empty(3 * d, d))
        self.bias = nn.Parameter(torch.empty(3 * d))
        self.bias_hidden_candidate = nn.Parameter(torch.empty(d)) if reset_after else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.init_uniform_(1.0 / math.sqrt(self.hidden_size))

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}, reset_after={self.reset_after}"

    @classmethod
    def from_torch(cls, module: nn.GRU | nn.GRUCell) -> "GRU":
        """The GRU field whose Euler step with Δt = 1 is ``module`` (a single-layer, unidirectional
        torch.nn.GRU or a torch.nn.GRUCell). torch's gate order is (r, z, n), h' = (1 − z) n + z h,
        n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)): σ(f) = 1 − z, so f's rows are torch's z rows negated."""
        if isinstance(module, nn.GRU):
            if module.num_layers != 1 or module.bidirectional or getattr(module, "proj_size", 0):
                raise ValueError("module: only a single-layer, unidirectional torch.nn.GRU can be converted, got "
                                 f"num_layers={module.num_layers}, bidirectional={module.bidirectional}")
            names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
        elif isinstance(module, nn.GRUCell):
            names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        else:
            raise TypeError(f"module: expected torch.nn.GRU or torch.nn.GRUCell, got {type(module).__name__}")
        weight_ih, weight_hh = getattr(module, names[0]), getattr(module, names[1])
        d = module.hidden_size
        zeros = weight_ih.new_zeros(3 * d)
        bias_ih = getattr(module, names[2]) if module.bias else zeros
        bias_hh = getattr(module, names[3]) if module.bias else zeros
        system = cls(module.input_size, d, reset_after=True).to(dtype=weight_ih.dtype, device=weight_ih.device)
        sign = torch.ones(3 * d, 1, dtype=weight_ih.dtype, device=weight_ih.device)
        sign[d: 2 * d] = -1.0  # f = −(pre-activation of z_torch)
        with torch.no_grad():
            system.weight_input.copy_(sign * weight_ih)
            system.weight_hidden.copy_(sign * weight_hh)
            bias = sign[:, 0] * (bias_ih + bias_hh)
            bias[2 * d:] = bias_ih[2 * d:]  # b_u = b_in; b_hn stays inside the reset
            system.bias.copy_(bias)
            system.bias_hidden_candidate.copy_(bias_hh[2 * d:])
        return system

    def symbols(self) -> dict[str, Tensor]:
        d = self.hidden_size
        V_r, V_f, V_u = self.weight_input.split(d)
        W_r, W_f, W_u = self.weight_hidden.split(d)
        b_r, b_f, b_u = self.bias.split(d)
        symbols = dict(W_r=W_r, W_f=W_f, W_u=W_u, V_r=V_r, V_f=V_f, V_u=V_u, b_r=b_r, b_f=b_f, b_u=b_u)
        if self.reset_after:
            symbols["b_hu"] = self.bias_hidden_candidate
        return symbols

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.weight_input, self.bias

    def split(self, i, t, state, inp, *delayed):
        h = state[0]
        if inp is None:  # autonomous use: the encoding of a zero input is the bias
            inp = self.bias
        d = self.hidden_size
        in_r, in_f, in_u = inp.split(d, dim=-1)
        W_rf, W_u = self.weight_hidden.split((2 * d, d))
        reset_pre, update_pre = F.linear(h, W_rf).split(d, dim=-1)
        reset = torch.sigmoid(reset_pre + in_r)  # σ(r)
        update = torch.sigmoid(update_pre + in_f)  # σ(f)
        if self.reset_after:
            candidate = torch.tanh(in_u + reset * F.linear(h, W_u, self.bias_hidden_candidate))
        else:
            candidate = torch.tanh(in_u + F.linear(reset * h, W_u))
        return update * candidate, update  # σ(f) tanh(u) − σ(f) h

    def derivative(self, t, state, inp, *delayed):
        return (self.block_derivative(0, t, state, inp),)


class MGU(System):
    """The minimal gated unit (Zhou et al. 2016; a baseline of Farsang et al. 2024, Tables 1 and 2) as an ODE, one
    state block ``h``:

        dh/dt = σ(f) ⊙ (tanh(u) − h),   f = W_f h + V_f x + b_f,   u = W_u (σ(f) ⊙ h) + V_u x + b_u

    whose explicit Euler step with Δt = 1 is the MGU, h_t = (1 − σ(f)) ⊙ h_{t−1} + σ(f) ⊙ tanh(u): its one gate both
    updates and resets (the GRU's σ(r) replaced by σ(f)). Storage: ``weight_input`` = [V_f; V_u], ``bias`` =
    [b_f; b_u], ``weight_hidden`` = [W_f; W_u]: 2d(d + m + 1) parameters, the paper's count. Initialised U(−1/√d,
    1/√d), as the GRU. The field splits as forcing σ(f) ⊙ tanh(u), decay σ(f).
    """

    blocks = ("h",)
    observable = "h"
    split_blocks = ("h",)

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        d = hidden_size
        self.weight_input = nn.Parameter(torch.empty(2 * d, input_size))
        self.weight_hidden = nn.Parameter(torch.empty(2 * d, d))
        self.bias = nn.Parameter(torch.empty(2 * d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.init_uniform_(1.0 / math.sqrt(self.hidden_size))

    def symbols(self) -> dict[str, Tensor]:
        d = self.hidden_size
        (V_f, V_u), (W_f, W_u), (b_f, b_u) = (w.split(d) for w in (self.weight_input, self.weight_hidden, self.bias))
        return dict(W_f=W_f, W_u=W_u, V_f=V_f, V_u=V_u, b_f=b_f, b_u=b_u)

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.weight_input, self.bias

    def split(self, i, t, state, inp, *delayed):
        h = state[0]
        if inp is None:  # autonomous use: the encoding of a zero input is the bias
            inp = self.bias
        d = self.hidden_size
        in_f, in_u = inp.split(d, dim=-1)
        W_f, W_u = self.weight_hidden.split(d)
        gate = torch.sigmoid(F.linear(h, W_f) + in_f)  # σ(f)
        candidate = torch.tanh(F.linear(gate * h, W_u) + in_u)
        return gate * candidate, gate

    def derivative(self, t, state, inp, *delayed):
        return (self.block_derivative(0, t, state, inp),)
