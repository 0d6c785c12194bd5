"""Graph vector fields: GraphCON (thesis ch. 7) and Gradient Gating G² (thesis ch. 8).

Time is depth: a node-feature state X ∈ R^{v×m} evolves under a *coupling function* F_θ(X, G) -- any module
called as ``F(x, edge_index)`` (PyG's GCNConv / GATConv / SAGEConv, or :class:`GCNCoupling` /
:class:`GATCoupling` shipped in :mod:`odelab.systems.graph_coupling`). One step of the published scheme with
Δt = 1 is one GNN layer.

GraphCON (7.3), the graph analogue of coRNN's damped driven oscillator, velocity Y, position X:

    Y' = σ(F_θ(X, G) + R X) − γ X − α Y                                                      (7.3, Y)
    X' = Y                                                                                   (7.3, X)

with R X the official code's optional learned linear "residual" inside σ (``residual``; none in (7.3)).
The published layer (7.4) is one partitioned step, Y first with explicit damping, then X with the new Y:

    Yⁿ = Yⁿ⁻¹ + Δt [σ(F_θ(Xⁿ⁻¹) + R Xⁿ⁻¹) − γ Xⁿ⁻¹ − α Yⁿ⁻¹],   Xⁿ = Xⁿ⁻¹ + Δt Yⁿ               (7.4)

= ``FIXED_SCHEMES["imex"]`` (Y splits as forcing σ(·) − γX, decay α) or ``"symplectic-euler"`` (same values).

G² (8.9), a gated relaxation towards the message-passing update, one rate per node and channel:

    X' = τ ⊙ (σ(F_θ(X, G)) − X)                                                              (8.9)
    τ_ik = tanh( AGG_{j ∈ N(i)} |τ̂_jk − τ̂_ik|^p ),   τ̂ = σ̂(F̂_θ̂(X, G))                         (8.4)

The published layer is forward Euler with Δt = 1 (``"euler"``, or ``"imex"``: X splits as forcing
τ ⊙ σ(F), decay τ ≥ 0):  Xⁿ = (1 − τⁿ) ⊙ Xⁿ⁻¹ + τⁿ ⊙ σ(F_θ(Xⁿ⁻¹)). Official code (tk-rusch/gradientgating):
σ̂ = ReLU (not a sigmoid), AGG = mean over the incoming edges (``scatter(..., col, reduce="mean")``),
F̂ = F (one conv shared across layers) unless a separate gate coupling is given.

**State layout.** A block is either ``(num_nodes, m)`` (*node layout*: one graph signal, the solvers' batch
dimension runs over the nodes) or ``(B, num_nodes * m)`` (*packed layout*: B signals on the same graph;
``pack``/``unpack`` convert). Fixed-step schemes treat every node alike, so both layouts give the same
values. Adaptive solvers (dopri5, ...) keep one step size per batch row -- the nodes of a graph are coupled
and must share it, so they need the packed layout; a node-layout state under an adaptive solver raises a
ValueError saying so.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .base import System
from .graph_coupling import (GATCoupling, GCNCoupling, HeadMean, SparseOperator, _Propagator, _SpMM,
                             check_edge_index)


def _adjacency(edge_index: Tensor, num_nodes: int, dtype) -> Tensor:
    """The 0/1 adjacency (rows = targets) as a sparse COO matrix, duplicates summed as in the edge sums."""
    values = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
    return torch.sparse_coo_tensor(edge_index.flip(0), values, (num_nodes, num_nodes), check_invariants=False).coalesce()

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": torch.relu, "tanh": torch.tanh, "elu": F.elu, "sigmoid": torch.sigmoid, "identity": lambda x: x,
}


def _activation(value, name: str) -> tuple[str, Callable[[Tensor], Tensor]]:
    if isinstance(value, str):
        if value not in _ACTIVATIONS:
            raise ValueError(f"{name}: expected one of {sorted(_ACTIVATIONS)} or a callable, got {value!r}")
        return value, _ACTIVATIONS[value]
    if callable(value):
        return getattr(value, "__name__", type(value).__name__), value
    raise TypeError(f"{name}: expected a name or a callable, got {type(value).__name__}")


def _number(name: str, value, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
        raise ValueError(f"{name}: expected a finite number >= {low:g}, got {value!r}")
    return float(value)


class GraphSystem(System):
    """Shared machinery: the bound graph, the two state layouts, the coupling module."""

    def __init__(self, coupling: nn.Module, hidden_size: int, edge_index: Tensor | None, num_nodes: int | None):
        super().__init__()
        self.set_sizes(0, hidden_size)
        if not isinstance(coupling, nn.Module) or not callable(coupling):
            raise TypeError(f"coupling: expected an nn.Module called as F(x, edge_index), got {type(coupling).__name__}")
        self.coupling = coupling
        self.num_nodes = 0
        self.register_buffer("edge_index", torch.zeros(2, 0, dtype=torch.long), persistent=False)
        self._batched: dict[int, Tensor] = {}
        if edge_index is not None:
            self.set_graph(edge_index, num_nodes)
        elif num_nodes is not None:
            raise ValueError("num_nodes: given without edge_index")

    # -- the graph ------------------------------------------------------------------------------------------
    def set_graph(self, edge_index: Tensor, num_nodes: int | None = None) -> None:
        """Bind the graph: ``edge_index`` (2, E) long, messages source → target; ``num_nodes`` defaults to
        max index + 1 (give it when the last nodes are isolated)."""
        edge_index = check_edge_index(edge_index)
        if num_nodes is None:
            num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise ValueError(f"num_nodes: expected an integer >= 1, got {num_nodes!r}")
        check_edge_index(edge_index, num_nodes)
        self.edge_index, self.num_nodes, self._batched = edge_index, num_nodes, {}

    @property
    def graph(self) -> Tensor:
        return self.edge_index

    @graph.setter
    def graph(self, edge_index: Tensor) -> None:
        self.set_graph(edge_index)

    def _edges_for(self, copies: int) -> Tensor:
        """edge_index of ``copies`` disjoint copies of the graph (node i of copy b is b·v + i), cached."""
        if copies == 1:
            return self.edge_index
        cached = self._batched.get(copies)
        if cached is None or cached.device != self.edge_index.device:
            offsets = torch.arange(copies, device=self.edge_index.device).repeat_interleave(self.edge_index.shape[1])
            cached = self.edge_index.repeat(1, copies) + offsets * self.num_nodes
            self._batched = {copies: cached}
        return cached

    # -- layouts --------------------------------------------------------------------------------------------
    def pack(self, x: Tensor) -> Tensor:
        """(v, m) or (B, v, m) → packed (B, v·m) (B = 1 for one signal)."""
        if x.dim() == 2:
            x = x.unsqueeze(0)
        if x.dim() != 3 or x.shape[1:] != (self.num_nodes, self.hidden_size):
            raise ValueError(f"x: expected shape (num_nodes={self.num_nodes}, {self.hidden_size}) or "
                             f"(B, {self.num_nodes}, {self.hidden_size}), got {tuple(x.shape)}")
        return x.reshape(x.shape[0], -1)

    def unpack(self, x: Tensor) -> Tensor:
        """Packed (..., v·m) → (..., v, m) (e.g. a solution block (B, T, v·m) → (B, T, v, m))."""
        return x.reshape(*x.shape[:-1], self.num_nodes, self.hidden_size)

    def _nodes(self, t, x: Tensor) -> tuple[Tensor, Tensor, tuple[int, ...]]:
        """A block as (nodes, m) plus the matching edge_index and the shape to restore."""
        v, m = self.num_nodes, self.hidden_size
        if v == 0:
            raise ValueError(f"{type(self).__name__}: no graph bound; set system.graph = edge_index first")
        if x.dim() == 2 and x.shape == (v, m):
            if isinstance(t, Tensor) and t.numel() > 1:
                raise ValueError(
                    f"y0: node layout (num_nodes, features) under a solver with one step size per batch row "
                    f"(adaptive): the coupled nodes would drift apart in time; pass the packed state "
                    f"system.pack(x) of shape (1, {v * m}) instead")
            return x, self.edge_index, tuple(x.shape)
        if x.dim() == 2 and x.shape[1] == v * m:
            return x.reshape(-1, m), self._edges_for(x.shape[0]), tuple(x.shape)
        raise ValueError(f"state: expected node layout ({v}, {m}) or packed (B, {v * m}), got {tuple(x.shape)}")

    def block_sizes(self) -> tuple[int, ...]:
        """Packed block widths ``num_nodes * m`` (what ``initial_state`` and the solvers' flat state use)."""
        return (max(self.num_nodes, 1) * self.hidden_size,) * len(self.blocks)

    def _coupling_symbols(self, prefix: str, weight_name: str, module: nn.Module) -> dict[str, Tensor]:
        """The coupling's parameters as ``prefix.name``, and its weight matrix (as nn.Linear stores it,
        ``(out, in)``) under ``weight_name`` when it has one (GCNCoupling.weight, PyG GCNConv.lin.weight)."""
        out = {f"{prefix}.{name}": p for name, p in module.named_parameters()}
        weight = getattr(module, "weight", None)
        if weight is None and hasattr(module, "lin"):
            weight = getattr(module.lin, "weight", None)
        if isinstance(weight, Tensor):
            out[weight_name] = weight
        return out


class GraphCON(GraphSystem):
    """GraphCON vector field (thesis eq. 7.3); state ``(Y, X)`` (velocity first, the update order of 7.4),
    observable X.

        Y' = σ(F_θ(X, G) + R X) − γ X − α Y,   X' = Y

    ``coupling``: F_θ, a module ``F(x, edge_index) -> (nodes, hidden_size)``; ``alpha`` (damping α ≥ 0) and
    ``gamma`` (frequency γ ≥ 0) fixed floats; ``activation`` σ ("relu" as the official GCN/SAGE
    models, "identity" with :class:`HeadMean` for the ELU-4-head GAT variant, "tanh", or a callable);
    ``residual``: ``True`` for a learned ``nn.Linear(hidden, hidden)`` R inside σ (the official experiment
    models), or a module, or ``None`` (7.3 as printed). Y splits for IMEX: forcing σ(·) − γX, decay α.
    """

    blocks = ("Y", "X")
    observable = "X"
    split_blocks = ("Y",)
    velocity_position = ("Y", "X")

    def __init__(self, coupling: nn.Module, hidden_size: int, alpha: float = 1.0, gamma: float = 1.0, *,
                 activation="relu", residual: bool | nn.Module | None = None, edge_index: Tensor | None = None,
                 num_nodes: int | None = None):
        super().__init__(coupling, hidden_size, edge_index, num_nodes)
        alpha, gamma = _number("alpha", alpha), _number("gamma", gamma)
        self._alpha, self._gamma = alpha, gamma  # fixed floats (as the official code): no tensor ops, no sync
        self.activation_name, self.activation = _activation(activation, "activation")
        if residual is True:
            residual = nn.Linear(hidden_size, hidden_size)
        elif residual is False:
            residual = None
        if residual is not None and not isinstance(residual, nn.Module):
            raise TypeError(f"residual: expected True/False, None or an nn.Module, got {type(residual).__name__}")
        self.residual = residual

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def gamma(self) -> float:
        return self._gamma

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, alpha={self.alpha:g}, gamma={self.gamma:g}, "
                f"activation={self.activation_name}, num_nodes={self.num_nodes}")

    def symbols(self) -> dict[str, Tensor]:
        out = {"α": torch.tensor(self._alpha), "γ": torch.tensor(self._gamma)}
        out.update(self._coupling_symbols("F_θ", "W", self.coupling))
        if self.residual is not None:
            out.update({f"R.{name}": p for name, p in self.residual.named_parameters()})
            if isinstance(getattr(self.residual, "weight", None), Tensor):
                out["R"] = self.residual.weight
        return out

    def _forcing(self, t, state) -> Tensor:
        """σ(F_θ(X) + R X) − γ X, the Y-forcing of (7.3)."""
        x, edges, shape = self._nodes(t, state[1])
        pre = self.coupling(x, edges)
        if self.residual is not None:
            pre = pre + self.residual(x)
        return torch.sub(self.activation(pre), x, alpha=self._gamma).reshape(shape)

    def split(self, i, t, state, inp, *delayed):
        if i != 0:
            return super().split(i, t, state, inp)
        return self._forcing(t, state), self._alpha

    def block_derivative(self, i, t, state, inp, *delayed):
        if i == 1:  # X' = Y
            return state[0]
        return torch.sub(self._forcing(t, state), state[0], alpha=self._alpha)

    def derivative(self, t, state, inp, *delayed):
        return self.block_derivative(0, t, state, inp), state[0]


class GradientGating(GraphSystem):
    """Gradient Gating G² vector field (thesis eq. 8.9); one state block ``X``.

        X' = τ ⊙ (σ(F_θ(X, G)) − X),   τ_ik = tanh(AGG_{j→i} |τ̂_jk − τ̂_ik|^p),   τ̂ = σ̂(F̂_θ̂(X, G))

    ``coupling`` F_θ; ``gate_coupling`` F̂ (``None``: F̂ = F, the official default, computed once per
    evaluation); ``p`` > 0 the G² exponent (official default 2); ``activation`` σ and ``gate_activation`` σ̂
    (both "relu" in the official code; the thesis text writes a sigmoid for σ̂); ``aggregation`` "mean"
    (official code) or "sum" (the thesis' Σ), over the edges j → i of the bound graph (self loops count if
    present, isolated nodes get τ = 0). X splits for IMEX: forcing τ ⊙ σ(F), decay τ.

    For p = 2 the sum is evaluated as (A τ̂²) − 2 τ̂ ⊙ (A τ̂) + deg ⊙ τ̂² with two sparse products (A the 0/1
    adjacency), clamped at 0 -- equal to the edge-wise sum up to round-off and ~4-8x cheaper on large graphs;
    set ``sparse_square = False`` for the edge-wise form (exact zeros between equal neighbours).
    """

    blocks = ("X",)
    observable = "X"
    split_blocks = ("X",)

    def __init__(self, coupling: nn.Module, hidden_size: int, p: float = 2.0, *, gate_coupling: nn.Module | None = None,
                 activation="relu", gate_activation="relu", aggregation: str = "mean",
                 edge_index: Tensor | None = None, num_nodes: int | None = None):
        super().__init__(coupling, hidden_size, edge_index, num_nodes)
        p = _number("p", p)
        if p <= 0:
            raise ValueError(f"p: expected a number > 0, got {p!r}")
        self._p = p
        if gate_coupling is not None and not isinstance(gate_coupling, nn.Module):
            raise TypeError(f"gate_coupling: expected an nn.Module or None, got {type(gate_coupling).__name__}")
        self.gate_coupling = gate_coupling
        self.activation_name, self.activation = _activation(activation, "activation")
        self.gate_activation_name, self.gate_activation = _activation(gate_activation, "gate_activation")
        if aggregation not in ("mean", "sum"):
            raise ValueError(f"aggregation: expected 'mean' or 'sum', got {aggregation!r}")
        self.aggregation = aggregation
        self.sparse_square = True  # p = 2: the sparse-product form of the τ sum (False: edge-wise, exact zeros)
        self._adjacency, self._deg_cache = _Propagator(), None

    @property
    def p(self) -> float:
        return self._p

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, p={self.p:g}, activation={self.activation_name}, "
                f"gate_activation={self.gate_activation_name}, aggregation={self.aggregation}, "
                f"shared_gate={self.gate_coupling is None}, num_nodes={self.num_nodes}")

    def symbols(self) -> dict[str, Tensor]:
        out = {"p": torch.tensor(self._p)}
        out.update(self._coupling_symbols("F_θ", "W", self.coupling))
        if self.gate_coupling is not None:
            out.update(self._coupling_symbols("F̂_θ̂", "Ŵ", self.gate_coupling))
        return out

    def rates(self, x: Tensor, edges: Tensor, tau_hat: Tensor) -> Tensor:
        """τ = tanh(AGG_{j→i} |τ̂_j − τ̂_i|^p) per node and channel (8.4), x and τ̂ in node layout."""
        p = self._p
        if p == 2.0 and self.sparse_square:
            # Σ_j A_ij (τ̂_j − τ̂_i)² = (A τ̂²)_i − 2 τ̂_i (A τ̂)_i + deg_i τ̂_i²: two sparse products instead of
            # (E, m) gathers and scatters (~8x faster on 10⁶ edges); clamped at 0 against round-off
            adjacency, transpose = self._adjacency.get(edges, x.shape[0], tau_hat.dtype, tau_hat.device, _adjacency)
            both = _SpMM.apply(SparseOperator(adjacency, transpose), torch.cat([tau_hat.square(), tau_hat], 1))
            sq, lin = both.split(tau_hat.shape[1], 1)
            deg = self._degree(edges, x.shape[0], tau_hat)
            total = (sq - 2 * tau_hat * lin + deg * tau_hat.square()).clamp_min(0.0)
        else:
            src, dst = edges[0], edges[1]
            diff = tau_hat.index_select(0, src) - tau_hat.index_select(0, dst)
            if p == 2.0:
                diff = diff.square()
            elif p == 1.0:
                diff = diff.abs()
            else:  # |d|^p with a float exponent (a tensor exponent takes the slow generic pow)
                diff = diff.abs().pow(p)
            total = torch.zeros_like(tau_hat).index_add_(0, dst, diff)
        if self.aggregation == "mean":
            total = total / self._degree(edges, x.shape[0], tau_hat).clamp_min(1.0)
        return torch.tanh(total)

    def _degree(self, edges: Tensor, n: int, like: Tensor) -> Tensor:
        """In-degree (n, 1), cached per graph tensor (held by the cache, with its version: an edit in place or
        another tensor recomputes it)."""
        key = (tuple(edges.shape), edges._version, n, like.dtype, str(like.device))
        if self._deg_cache is None or self._deg_cache[0] is not edges or self._deg_cache[1] != key:
            deg = torch.zeros(n, dtype=like.dtype, device=like.device).index_add_(
                0, edges[1], torch.ones(edges.shape[1], dtype=like.dtype, device=like.device))
            self._deg_cache = (edges, key, deg.unsqueeze(1))
        return self._deg_cache[2]

    def gate_and_update(self, t, x: Tensor) -> tuple[Tensor, Tensor]:
        """(τ, σ(F_θ(X))) in the block's own layout."""
        nodes, edges, shape = self._nodes(t, x)
        pre = self.coupling(nodes, edges)
        update = self.activation(pre)
        if self.gate_coupling is None:
            tau_hat = update if self.gate_activation is self.activation else self.gate_activation(pre)
        else:
            tau_hat = self.gate_activation(self.gate_coupling(nodes, edges))
        tau = self.rates(nodes, edges, tau_hat)
        return tau.reshape(shape), update.reshape(shape)

    def split(self, i, t, state, inp, *delayed):
        tau, update = self.gate_and_update(t, state[0])
        return tau * update, tau

    def derivative(self, t, state, inp, *delayed):
        tau, update = self.gate_and_update(t, state[0])
        return (tau * (update - state[0]),)


__all__ = ["GraphCON", "GradientGating", "GraphSystem", "GCNCoupling", "GATCoupling", "HeadMean"]
