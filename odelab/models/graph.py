"""Graph models: encoder → K layers → decoder, each layer one step of a graph system under its scheme.

Published models = (system, scheme, Δt) presets, as the sequence cells:

| model | system | scheme (one layer) | Δt | dropout (official code) |
|---|---|---|---|---|
| GraphCON-GCN / -GAT (thesis 7.4) | :class:`~odelab.systems.GraphCON`, one coupling shared by all layers, optional residual R inside σ | ``"imex"`` (Y then X, explicit damping) | 1 | input, after the encoder and on X and Y after every layer |
| G²-GCN / -GAT / -SAGE (thesis 8.4) | :class:`~odelab.systems.GradientGating`, shared coupling, F̂ = F, p = 2, mean τ-aggregation | ``"euler"`` | 1 | input and before the decoder only |
| GCN (6.1) | none: X^n = ReLU(GCN_n(X^{n−1})) with a fresh weight per layer | -- | -- | input and between layers |

Encoder ReLU(Linear) (X⁰ = Y⁰ = encoder output for GraphCON), decoder Linear. Each layer of the GraphCON and G²
models is ``FIXED_SCHEMES[method].step(Field(system), n Δt, state, Δt)`` -- the system and scheme are the
definition, nothing is written twice. :meth:`GraphODEModel.solve_forward` instead integrates the same system
with ``odelab.solve`` (e.g. adaptive ``dopri5``, GRAND-style) from 0 to ``layers · Δt``.

Couplings by name (``coupling=``): ``"gcn"`` (:class:`GCNCoupling`), ``"gat"`` (:class:`GATCoupling`, 4 heads,
ELU, mean over heads as the official code), and with PyTorch Geometric installed ``"pyg-gcn"``, ``"pyg-gat"``,
``"pyg-sage"``; or any module ``F(x, edge_index)``.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..solvers import solve
from ..solvers.field import Field
from ..solvers.schemes import FIXED_SCHEMES, Scheme
from ..systems.graph import GradientGating, GraphCON, GraphSystem
from ..systems.graph_coupling import GATCoupling, GCNCoupling, HeadMean

PYG_HINT = "PyTorch Geometric is needed for this; install it with `pip install odelab[graph]` (torch-geometric)"


def require_pyg():
    """Import torch_geometric or raise ImportError naming the extra."""
    try:
        import torch_geometric  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(PYG_HINT) from err
    return torch_geometric


def make_coupling(kind: str | nn.Module, hidden: int) -> tuple[nn.Module, str]:
    """A coupling module ``F(x, edge_index)`` of width ``hidden`` and the activation σ to use with it."""
    if isinstance(kind, nn.Module):
        return kind, "relu"
    if kind == "gcn":
        return GCNCoupling(hidden, hidden), "relu"
    if kind == "gat":
        return HeadMean(GATCoupling(hidden, hidden, heads=4), heads=4), "identity"
    if kind in ("pyg-gcn", "pyg-gat", "pyg-sage"):
        require_pyg()
        from torch_geometric.nn import GATConv, GCNConv, SAGEConv

        if kind == "pyg-gcn":
            return GCNConv(hidden, hidden), "relu"
        if kind == "pyg-sage":
            return SAGEConv(hidden, hidden), "relu"
        return HeadMean(GATConv(hidden, hidden, heads=4), heads=4), "identity"
    raise ValueError(f"coupling: expected 'gcn', 'gat', 'pyg-gcn', 'pyg-gat', 'pyg-sage' or a module, got {kind!r}")


def _probability(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name}: expected a probability in [0, 1), got {value!r}")
    return float(value)


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    return value


class GraphODEModel(nn.Module):
    """encoder → ``layers`` steps of ``system`` with ``scheme`` and step ``dt`` → decoder (node-level outputs).

    ``step_dropout``: dropout applied to every state block after every step (GraphCON's official placement);
    ``input_dropout`` on the raw features; ``output_dropout`` before the decoder.
    """

    def __init__(self, in_features: int, hidden: int, out_features: int, system: GraphSystem, layers: int,
                 method: str | Scheme, dt: float = 1.0, *, input_dropout: float = 0.0, step_dropout: float = 0.0,
                 encoder_dropout: float = 0.0, output_dropout: float = 0.0):
        super().__init__()
        self.layers = _positive_int("layers", layers)
        for name, value in (("in_features", in_features), ("hidden", hidden), ("out_features", out_features)):
            _positive_int(name, value)
        if isinstance(method, str):
            if method not in FIXED_SCHEMES:
                raise ValueError(f"method: expected one of {sorted(FIXED_SCHEMES)}, got {method!r}")
            method = FIXED_SCHEMES[method]
        method.check(system)
        self.scheme = method
        if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not dt > 0:
            raise ValueError(f"dt: expected a positive number, got {dt!r}")
        self.dt = float(dt)
        self.system = system
        self.enc = nn.Linear(in_features, hidden)
        self.dec = nn.Linear(hidden, out_features)
        self.input_dropout = _probability("input_dropout", input_dropout)
        self.step_dropout = _probability("step_dropout", step_dropout)
        self.encoder_dropout = _probability("encoder_dropout", encoder_dropout)
        self.output_dropout = _probability("output_dropout", output_dropout)

    def initial(self, x: Tensor) -> tuple[Tensor, ...]:
        """The encoded initial state: every block = ReLU(enc(x)) (X⁰ = Y⁰ for GraphCON)."""
        x = F.dropout(x, self.input_dropout, self.training)
        h = F.dropout(torch.relu(self.enc(x)), self.encoder_dropout, self.training)
        return tuple(h for _ in self.system.blocks)

    def forward(self, x: Tensor, edge_index: Tensor, *, return_states: bool = False):
        if edge_index is not self.system.edge_index:
            self.system.set_graph(edge_index, x.shape[0])
        state = self.initial(x)
        field = Field(self.system)
        states = [state]
        for n in range(self.layers):
            state = self.scheme.step(field, n * self.dt, state, self.dt)
            if self.step_dropout and self.training:
                state = tuple(F.dropout(s, self.step_dropout, True) for s in state)
            if return_states:
                states.append(state)
        out = state[self.system.block_index(self.system.observable)]
        logits = self.dec(F.dropout(out, self.output_dropout, self.training))
        return (logits, states) if return_states else logits

    def solve_forward(self, x: Tensor, edge_index: Tensor, *, method: str = "dopri5", t_end: float | None = None,
                      **options):
        """Integrate the system from 0 to ``t_end`` (default ``layers · dt``) with ``odelab.solve`` on the
        packed state (all nodes share the step size); returns ``(logits, solution)`` (stats in
        ``solution.stats``). Step dropout does not apply."""
        if edge_index is not self.system.edge_index:
            self.system.set_graph(edge_index, x.shape[0])
        state = tuple(self.system.pack(s) for s in self.initial(x))
        t_end = self.layers * self.dt if t_end is None else float(t_end)
        if method in FIXED_SCHEMES:
            options.setdefault("dt", self.dt)
        solution = solve(self.system, state, torch.tensor([0.0, t_end], dtype=torch.float64), method=method, **options)
        final = self.system.unpack(solution[self.system.observable][0, -1])
        return self.dec(F.dropout(final, self.output_dropout, self.training)), solution


class GraphCONModel(GraphODEModel):
    """GraphCON (thesis 7.4; tk-rusch/GraphCON): one shared coupling, Y⁰ = X⁰ = ReLU(enc(x)), ``layers``
    IMEX steps of Δt = ``dt`` (1 in every published run), dropout on the input, after the encoder and on X
    and Y after every layer, decoder on X. ``residual=True`` adds the official learned linear R inside σ."""

    def __init__(self, in_features: int, hidden: int, out_features: int, layers: int, *, coupling="gcn",
                 alpha: float = 1.0, gamma: float = 1.0, dt: float = 1.0, dropout: float = 0.0,
                 residual: bool = False, activation: str | Callable | None = None, method: str = "imex"):
        module, default_activation = make_coupling(coupling, hidden)
        system = GraphCON(module, hidden, alpha, gamma, activation=activation or default_activation,
                          residual=residual)
        super().__init__(in_features, hidden, out_features, system, layers, method, dt, input_dropout=dropout,
                         encoder_dropout=dropout, step_dropout=dropout)


class G2Model(GraphODEModel):
    """G² (thesis 8.4; tk-rusch/gradientgating): ReLU(enc(x)), ``layers`` forward-Euler steps of Δt = 1 of
    :class:`GradientGating` with one shared coupling (F̂ = F unless ``gate_coupling`` is given or
    ``separate_gate=True``), p-exponent ``p``, mean aggregation; dropout at the input (``input_dropout``)
    and before the decoder (``dropout``) only."""

    def __init__(self, in_features: int, hidden: int, out_features: int, layers: int, *, coupling="gcn",
                 p: float = 2.0, dt: float = 1.0, dropout: float = 0.0, input_dropout: float = 0.0,
                 separate_gate: bool = False, aggregation: str = "mean", method: str = "euler"):
        module, activation = make_coupling(coupling, hidden)
        gate = make_coupling(coupling, hidden)[0] if separate_gate else None
        system = GradientGating(module, hidden, p, gate_coupling=gate, activation=activation,
                                gate_activation=activation, aggregation=aggregation)
        super().__init__(in_features, hidden, out_features, system, layers, method, dt,
                         input_dropout=input_dropout, output_dropout=dropout)


class GCNModel(nn.Module):
    """Plain deep GCN (message passing 6.1): ReLU(enc(x)), ``layers`` × X ← ReLU(GCN_n(X)) with one weight
    per layer (``shared=False``, standard) or one shared, dropout between layers, decoder Linear."""

    def __init__(self, in_features: int, hidden: int, out_features: int, layers: int, *, dropout: float = 0.0,
                 shared: bool = False, coupling="gcn"):
        super().__init__()
        self.layers = _positive_int("layers", layers)
        self.dropout = _probability("dropout", dropout)
        self.enc = nn.Linear(in_features, hidden)
        self.dec = nn.Linear(hidden, out_features)
        count = 1 if shared else layers
        convs = [make_coupling(coupling, hidden) for _ in range(count)]
        self.activation = {"relu": torch.relu, "identity": lambda v: v}[convs[0][1]]
        self.convs = nn.ModuleList(c for c, _ in convs)

    def forward(self, x: Tensor, edge_index: Tensor, *, return_states: bool = False):
        x = F.dropout(x, self.dropout, self.training)
        h = torch.relu(self.enc(x))
        states = [(h,)]
        for n in range(self.layers):
            h = F.dropout(h, self.dropout, self.training)
            h = self.activation(self.convs[n % len(self.convs)](h, edge_index))
            if return_states:
                states.append((h,))
        logits = self.dec(h)
        return (logits, states) if return_states else logits


MODELS = {"gcn": GCNModel, "graphcon": GraphCONModel, "g2": G2Model}


def build_graph_model(name: str, in_features: int, hidden: int, out_features: int, layers: int, **kw) -> nn.Module:
    """``name``: "gcn", "graphcon-gcn", "graphcon-gat", "g2-gcn", "g2-gat" (+ "pyg-" couplings, e.g.
    "g2-pyg-sage"); keyword arguments go to the model class."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a model name, got {type(name).__name__}")
    if name in ("gcn", "gat"):
        return GCNModel(in_features, hidden, out_features, layers, coupling=name, **kw)
    family, _, coupling = name.partition("-")
    if family not in ("graphcon", "g2") or not coupling:
        raise ValueError(f"name: expected 'gcn', 'gat', 'graphcon-<coupling>' or 'g2-<coupling>', got {name!r}")
    return MODELS[family](in_features, hidden, out_features, layers, coupling=coupling, **kw)


__all__ = ["GraphODEModel", "GraphCONModel", "G2Model", "GCNModel", "build_graph_model", "make_coupling",
           "require_pyg", "PYG_HINT"]
