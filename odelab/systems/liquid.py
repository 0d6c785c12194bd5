"""Liquid networks: LTC/EEC, STC and LRC (Farsang, Neubauer & Grosu, "Liquid Resistance Liquid Capacitance
Networks", eqs. 1–5, App. A.2).

Every neuron i receives one chemical synapse from every presynaptic value y_j, y = [h, x] (neurons, then
inputs), with the per-synapse open probability σ(a_ji y_j + b_ji):

    f_i = Σ_j g_ji σ(a_ji y_j + b_ji) + g_li          (forget conductance)                  (1)
    u_i = Σ_j k_ji σ(a_ji y_j + b_ji) + g_li          (signed update conductance)           (1)
    LTC/EEC:  ḣ_i = −f_i h_i + u_i e_li                                                       (1)
    STC:      ḣ_i = −σ(f_i) h_i + tanh(u_i) e_li                                              (2)
    LRC:      ḣ_i = ε(w_i) (−σ(f_i) h_i + tanh(u_i) e_li),   w_i = Σ_j o_ji y_j + p_i          (3)
              ε(w) = σ(w) (asymmetric, 4)   or   ε(w) = σ(w + k) − σ(w − k), k ≥ 0 (symmetric, 5)

Every field splits as forcing − decay·h with decay ≥ 0 (LTC: u e_l and f; STC: tanh(u) e_l and σ(f);
LRC: ε tanh(u) e_l and ε σ(f)). The published discretisations are schemes on these fields:

* LRCU-A / LRCU-S (App. A.2.1, eq. 52) = LRC + explicit Euler, one unfolding, Δt = 1:
  ``Recurrent(LRC(..., elastance="asymmetric"|"symmetric"), "euler", 1.0)``;
* the LTC fused solver (ncps; "hybrid" H6 in the paper) = LTC + semi-implicit Euler (decay implicit),
  h ← (h + δ u e_l) / (1 + δ f), L unfoldings of δ = Δ/L: ``Recurrent(LTC(...), "imex-implicit", Δ, unfolds=L)``.

Positivity (the paper implies g_ji, g_li ≥ 0 and states k_i ≥ 0 without saying how; our choice, as the
ncps LTC default ``implicit_param_constraints=True``): the conductances g_ji, g_li and the symmetric shift
k_i are stored unconstrained and used through softplus, so the field always sees positive values.
:meth:`symbols` returns those constrained values (computed, not views); every other symbol is a view.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .base import System

ELASTANCES = ("asymmetric", "symmetric")


def _inverse_softplus(x: Tensor) -> Tensor:
    return x + torch.log(-torch.expm1(-x))


class _ChemicalSynapses(System):
    """Shared parameters and conductances f, u of eq. 1 over y = [h, x]; one state block ``h``.

    Parameters, presynaptic index first ((m + n, m) matrices): ``raw_g`` (g = softplus(raw_g), the maximum
    conductances), ``a`` (slopes), ``b`` (offsets), ``k`` (signed update weights k_ji = g_ji e_ji / e_li),
    and per neuron ``raw_g_leak`` (g_l = softplus(raw_g_leak)) and ``e_leak`` (e_l). Initialisation as the
    ncps LTC / official LRC code: g, g_l ~ U(0.001, 1), slope a ~ U(3, 8), offset b = −a μ with
    μ ~ U(0.3, 0.8), e_l ~ U(−0.2, 0.2); k ~ U(−1, 1) (the paper gives none; ours).
    """

    blocks = ("h",)
    observable = "h"
    split_blocks = ("h",)

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        pre, m = input_size + hidden_size, hidden_size
        self.raw_g = nn.Parameter(torch.empty(pre, m))
        self.a = nn.Parameter(torch.empty(pre, m))
        self.b = nn.Parameter(torch.empty(pre, m))
        self.k = nn.Parameter(torch.empty(pre, m))
        self.raw_g_leak = nn.Parameter(torch.empty(m))
        self.e_leak = nn.Parameter(torch.empty(m))
        self._reset_synapses()

    def _reset_synapses(self) -> None:
        with torch.no_grad():
            self.raw_g.copy_(_inverse_softplus(torch.empty_like(self.raw_g).uniform_(0.001, 1.0)))
            self.a.uniform_(3.0, 8.0)
            self.b.copy_(-self.a * torch.empty_like(self.b).uniform_(0.3, 0.8))
            self.k.uniform_(-1.0, 1.0)
            self.raw_g_leak.copy_(_inverse_softplus(torch.empty_like(self.raw_g_leak).uniform_(0.001, 1.0)))
            self.e_leak.uniform_(-0.2, 0.2)

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}"

    def symbols(self) -> dict[str, Tensor]:
        return {"g": F.softplus(self.raw_g), "a": self.a, "b": self.b, "k": self.k,
                "g_l": F.softplus(self.raw_g_leak), "e_l": self.e_leak}

    def _presynaptic(self, h: Tensor, inp: Tensor | None) -> Tensor:
        """y = [h, x] (x = the first ``input_size`` features of the encoded input; none when autonomous)."""
        return h if inp is None else torch.cat((h, inp[..., : self.input_size]), dim=-1)

    def conductances(self, y: Tensor) -> tuple[Tensor, Tensor]:
        """(f, u) of eq. 1 for presynaptic values y ``(batch, P)``; P = m (autonomous) or m + n."""
        rows = y.shape[-1]
        opening = torch.sigmoid(self.a[:rows] * y.unsqueeze(-1) + self.b[:rows])  # σ(a_ji y_j + b_ji), (batch, P, m)
        g_leak = F.softplus(self.raw_g_leak)
        f = torch.einsum("bjm,jm->bm", opening, F.softplus(self.raw_g[:rows])) + g_leak
        u = torch.einsum("bjm,jm->bm", opening, self.k[:rows]) + g_leak
        return f, u

    def derivative(self, t, state, inp, *delayed):
        return (self.block_derivative(0, t, state, inp),)


class LTC(_ChemicalSynapses):
    """LTC / EEC vector field (eq. 1): ḣ = −f ⊙ h + u ⊙ e_l; split forcing u ⊙ e_l, decay f ≥ 0."""

    def split(self, i, t, state, inp, *delayed):
        f, u = self.conductances(self._presynaptic(state[0], inp))
        return u * self.e_leak, f


class STC(_ChemicalSynapses):
    """Saturated LTC vector field (eq. 2): ḣ = −σ(f) ⊙ h + tanh(u) ⊙ e_l."""

    def split(self, i, t, state, inp, *delayed):
        f, u = self.conductances(self._presynaptic(state[0], inp))
        return torch.tanh(u) * self.e_leak, torch.sigmoid(f)


class LRC(_ChemicalSynapses):
    """LRC vector field (eqs. 3–5): ḣ = ε(w) ⊙ (−σ(f) ⊙ h + tanh(u) ⊙ e_l), w = O^T y + p.

    ``elastance``: "asymmetric" ε(w) = σ(w) (eq. 4) or "symmetric" ε(w) = σ(w + k) − σ(w − k) (eq. 5) with
    k = softplus(raw_k_shift) ≥ 0, initialised to k = 1 (official code). The elastance weights are
    ``o_hidden`` (m, m) and ``o_input`` (n, m) (together O, presynaptic index first), initialised
    U(−1/√(m + n), 1/√(m + n)), and p = ``p`` = 0 (ours). ``encode(x) = [x, O_x^T x + p]``: the input part of
    w for the whole sequence in one matmul.
    """

    def __init__(self, input_size: int, hidden_size: int, elastance: str = "asymmetric"):
        super().__init__(input_size, hidden_size)
        if elastance not in ELASTANCES:
            raise ValueError(f"elastance: expected one of {ELASTANCES}, got {elastance!r}")
        self.elastance = elastance
        m = hidden_size
        self.o_hidden = nn.Parameter(torch.empty(m, m))
        self.o_input = nn.Parameter(torch.empty(input_size, m))
        self.p = nn.Parameter(torch.zeros(m))
        self.raw_k_shift = nn.Parameter(torch.empty(m)) if elastance == "symmetric" else None
        bound = 1.0 / math.sqrt(input_size + hidden_size)
        with torch.no_grad():
            self.o_hidden.uniform_(-bound, bound)
            self.o_input.uniform_(-bound, bound)
            if self.raw_k_shift is not None:
                self.raw_k_shift.copy_(_inverse_softplus(torch.ones(m)))

    def extra_repr(self) -> str:
        return super().extra_repr() + f", elastance={self.elastance!r}"

    def symbols(self) -> dict[str, Tensor]:
        symbols = super().symbols()
        symbols.update(o=torch.cat((self.o_hidden, self.o_input)), o_hidden=self.o_hidden, o_input=self.o_input,
                       p=self.p)
        if self.raw_k_shift is not None:
            symbols["k_shift"] = F.softplus(self.raw_k_shift)
        return symbols

    def encode(self, u: Tensor) -> Tensor:
        return torch.cat((u, self.input_drive(u)), dim=-1)

    def input_drive(self, u: Tensor) -> Tensor:
        """O_x^T x + p, the input part of w (eq. 3), for inputs ``(..., n)``."""
        return u @ self.o_input + self.p

    def elastance_of(self, w: Tensor) -> Tensor:
        """ε(w): eq. 4 (asymmetric) or eq. 5 (symmetric)."""
        if self.raw_k_shift is None:
            return torch.sigmoid(w)
        shift = F.softplus(self.raw_k_shift)
        return torch.sigmoid(w + shift) - torch.sigmoid(w - shift)

    def split(self, i, t, state, inp, *delayed):
        h = state[0]
        f, u = self.conductances(self._presynaptic(h, inp))
        w_input = self.p if inp is None else inp[..., self.input_size:]
        eps = self.elastance_of(h @ self.o_hidden + w_input)
        return eps * torch.tanh(u) * self.e_leak, eps * torch.sigmoid(f)
