"""τ-GRU and Delay GRU (Erichson, Lim, Mahoney, "Gated Recurrent Neural Networks with Weighted Time-Delay
Feedback", Erichson et al. 2025): gated delay differential equations with one constant delay τ and zero history.

τ-GRU, continuous (Erichson et al. 2025, eq. 1), with the ablation switches α, β of §5 (α = β = 1 is the paper's model):

    u = tanh(W1 h(t) + U1 x(t) + b1)                     instantaneous unit        (3)
    z = tanh(W2 h(t − τ) + U2 x(t) + b2)                 delay unit                (4)
    g = σ̂(W3 h(t) + U3 x(t) + b3)                        gate / time scale         (5)
    a = σ̂(W4 h(t) + U4 x(t) + b4)                        delay weighting           (6)
    dh/dt = g ⊙ (β u + α a ⊙ z − h),    h(t) = 0 for t ≤ 0                         (1)

Its forward-Euler step with Δt = 1 and the delayed state h_{n−⌊τ/Δt⌋} is the published cell (eq. 2 = 14):
h_{n+1} = (1 − g_n) ⊙ h_n + g_n ⊙ (β u_n + α a_n ⊙ z_n) -- ``Recurrent(TauGRU(...), "euler", 1.0)``.

Delay GRU, the time-warped delayed RNN (Erichson et al. 2025, eq. 8--9; its Euler step is eq. 12):

    dh/dt = g ⊙ (tanh(W1 h(t) + W2 h(t − τ) + U x(t) + b) − h),   g = σ̂(W3 h + U3 x + b3)     (9, 12)

Both fields split as forcing − decay · h with decay = g ≥ 0, so the IMEX schemes apply too.

Official code : its cell lags the *input* too -- z and a read
(h_{n−τ+1}, x_{n−τ}) -- and multiplies the gate by Δt; the system contract passes no delayed input, so
that variant is not a vector field of this form. This module follows the paper's equations.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .base import State, System


class _GatedDelay(System):
    """Shared storage: ``weight_h`` stacks the maps of h(t), ``W2`` acts on h(t − τ), ``weight_input`` and
    ``bias`` stack the input maps and biases so that ``encode(x)`` is one matmul for a whole sequence.
    Initialisation as the official code: every weight and bias U(−1/√d, 1/√d). One bias per
    pre-activation; ``official_bias=True`` is the official cell's layout, two (its nn.Linear on h and on x each
    carry one, §1.8's parameter counts): a second vector ``bias_state`` added to ``bias``, each moving at the
    learning rate under Adam."""

    blocks = ("h",)
    observable = "h"
    split_blocks = ("h",)

    def __init__(self, input_size: int, hidden_size: int, tau: float, h_maps: int, input_maps: int,
                 official_bias: bool, delayed_map: bool = True):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        if not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau < 0:
            raise ValueError(f"tau: expected a finite delay >= 0, got {tau!r}")
        self.tau = float(tau)
        d = hidden_size
        self.weight_h = nn.Parameter(torch.empty(h_maps * d, d))
        self.W2 = nn.Parameter(torch.empty(d, d)) if delayed_map else None
        self.weight_input = nn.Parameter(torch.empty(input_maps * d, input_size))
        self.bias = nn.Parameter(torch.empty(input_maps * d))
        self.bias_state = nn.Parameter(torch.empty(input_maps * d)) if official_bias else None
        self.reset_parameters()

    @property
    def official_bias(self) -> bool:
        return self.bias_state is not None

    def reset_parameters(self) -> None:
        self.init_uniform_(1.0 / math.sqrt(self.hidden_size))

    def input_bias(self) -> Tensor:
        """The stacked biases of the branches, the sum of both vectors in the official layout."""
        return self.bias if self.bias_state is None else self.bias + self.bias_state

    @property
    def delays(self) -> tuple[float, ...]:
        """(τ,); empty when τ = 0 (the no-delay ablation: h(t − τ) = h(t))."""
        return (self.tau,) if self.tau > 0 else ()

    def encoding(self) -> tuple[Tensor, Tensor]:
        return self.weight_input, self.input_bias()

    def _encoded(self, inp: Tensor | None, h: Tensor) -> list[Tensor]:
        if inp is None:  # autonomous use: the encoding is the bias alone
            inp = self.input_bias().expand(h.shape[0], -1)
        return list(inp.split(self.hidden_size, dim=-1))

    def derivative(self, t, state: State, inp: Tensor | None, *delayed: State) -> State:
        return (self.block_derivative(0, t, state, inp, *delayed),)

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}, tau={self.tau}"


class TauGRU(_GatedDelay):
    """τ-GRU vector field (Erichson et al. 2025, eq. 1, 3--6); state ``(h,)``; ``delays = (τ,)`` in time units (steps of
    the cell when Δt = 1).

    Ablations (Erichson et al. 2025, §5, Tables 4, 6, 8, 9): ``alpha`` (delay branch α a ⊙ z; 0 removes z, a and W2),
    ``beta`` (instantaneous branch β u; 0 removes u), ``weighting=False`` (a ≡ 1, "without a_t"),
    ``gating=False`` (g ≡ 1, "no gating": dh/dt = β u + α a ⊙ z − h, the ungated eq. 17), ``tau=0``
    (no delay: z reads h(t)). Branches switched off own no parameters, so parameter counts follow the
    paper's ablation rows (up to the one-bias convention, see :class:`_GatedDelay`).

    Storage: ``weight_h`` = [W1; W3; W4] (present maps, in that order), ``W2``, ``weight_input`` =
    [U1; U2; U3; U4] and ``bias`` = [b1; b2; b3; b4] (present branches, in that order).
    """

    def __init__(self, input_size: int, hidden_size: int, tau: float, *, alpha: float = 1.0, beta: float = 1.0,
                 weighting: bool = True, gating: bool = True, official_bias: bool = False):
        for name, value in (("alpha", alpha), ("beta", beta)):
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: expected a constant in [0, 1], got {value!r}")
        if alpha == 0 and beta == 0:
            raise ValueError("alpha, beta: at least one branch must be on (both are 0)")
        present = {"u": beta != 0, "z": alpha != 0, "g": bool(gating), "a": bool(weighting) and alpha != 0}
        branches = tuple(b for b in ("u", "z", "g", "a") if present[b])  # input maps U1..U4
        h_branches = tuple(b for b in ("u", "g", "a") if present[b])  # maps of h(t): W1, W3, W4
        super().__init__(input_size, hidden_size, tau if alpha != 0 else 0.0, len(h_branches), len(branches),
                         official_bias, delayed_map=alpha != 0)
        self.alpha, self.beta = float(alpha), float(beta)
        self.branches, self.h_branches = branches, h_branches

    _symbol = {"u": "1", "z": "2", "g": "3", "a": "4"}

    def symbols(self) -> dict[str, Tensor]:
        d = self.hidden_size
        found = {"W2": self.W2}
        found.update(("W" + self._symbol[b], w) for b, w in zip(self.h_branches, self.weight_h.split(d)))
        for b, u, c in zip(self.branches, self.weight_input.split(d), self.input_bias().split(d)):
            found["U" + self._symbol[b]], found["b" + self._symbol[b]] = u, c
        names = [letter + n for letter in ("W", "U", "b") for n in "1234"]
        return {name: found[name] for name in names if found.get(name) is not None}

    def split(self, i, t, state, inp, *delayed):
        """forcing = g ⊙ (β u + α a ⊙ z), decay = g (eq. 1); g ≡ 1 without gating."""
        h = state[0]
        enc = dict(zip(self.branches, self._encoded(inp, h)))
        pre = dict(zip(self.h_branches, F.linear(h, self.weight_h).split(self.hidden_size, dim=-1)))
        target = None
        if "u" in enc:
            u = torch.tanh(pre["u"] + enc["u"])  # (3)
            target = u if self.beta == 1.0 else self.beta * u
        if "z" in enc:
            h_delayed = delayed[0][0] if delayed else h
            z = torch.tanh(F.linear(h_delayed, self.W2) + enc["z"])  # (4)
            if "a" in enc:
                z = torch.sigmoid(pre["a"] + enc["a"]) * z  # (6)
            z = z if self.alpha == 1.0 else self.alpha * z
            target = z if target is None else target + z
        if "g" in enc:
            g = torch.sigmoid(pre["g"] + enc["g"])  # (5)
            return g * target, g
        return target, torch.ones_like(h)


class DelayGRU(_GatedDelay):
    """Delay GRU vector field (Erichson et al. 2025, eq. 9; the cell eq. 12 is its Euler step with Δt = 1); state ``(h,)``.

    Storage: ``weight_h`` = [W1; W3], ``W2`` (on h(t − τ)), ``weight_input`` = [U; U3], ``bias`` = [b; b3].
    """

    def __init__(self, input_size: int, hidden_size: int, tau: float, *, official_bias: bool = False):
        super().__init__(input_size, hidden_size, tau, 2, 2, official_bias)

    def symbols(self) -> dict[str, Tensor]:
        d = self.hidden_size
        W1, W3 = self.weight_h.split(d)
        U, U3 = self.weight_input.split(d)
        b, b3 = self.input_bias().split(d)
        return dict(W1=W1, W2=self.W2, W3=W3, U=U, U3=U3, b=b, b3=b3)

    def split(self, i, t, state, inp, *delayed):
        """forcing = g ⊙ tanh(W1 h + W2 h(t − τ) + U x + b), decay = g = σ̂(W3 h + U3 x + b3) (eq. 12)."""
        h = state[0]
        h_delayed = delayed[0][0] if delayed else h
        enc_c, enc_g = self._encoded(inp, h)
        pre_c, pre_g = F.linear(h, self.weight_h).split(self.hidden_size, dim=-1)
        g = torch.sigmoid(pre_g + enc_g)
        return g * torch.tanh(pre_c + F.linear(h_delayed, self.W2) + enc_c), g
