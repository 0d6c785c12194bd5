"""The generic loop of any (system, scheme) pair on CUDA, forward and backward captured once per input shape in
CUDA graphs (``torch.cuda.make_graphed_callables``) and replayed: one launch of the captured work per call
instead of one per small operation, for systems that have no hand-written kernel. The loop itself is the
definition (``odelab.solvers.recurrence.run_sequence``); this only records it.

Static shapes: each new (batch, time, dtype, device, requires-grad pattern) is captured on first use (a few
warm-up iterations) and cached on the model; the captured graph holds its own copies of the inputs and
outputs, so memory grows with the number of cached shapes.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..solvers.recurrence import run_sequence
from ..solvers.schemes import Scheme
from ..systems.base import State, System


class _Loop(nn.Module):
    """The generic sequence loop as a module (what ``make_graphed_callables`` captures): ``(x, *state) ->
    (outputs, *final_state)``."""

    def __init__(self, system: System, scheme: Scheme, dt: float, unfolds: int, lags: tuple[int, ...]):
        super().__init__()
        self.system = system
        self.scheme, self.dt, self.unfolds, self.lags = scheme, dt, unfolds, lags

    def forward(self, x: Tensor, *state: Tensor) -> tuple[Tensor, ...]:
        outputs, final = run_sequence(self.system, self.scheme, x, tuple(state), self.dt, self.unfolds, self.lags)
        return (outputs, *final)


class GraphCache:
    """Captured loops of one model, by input signature."""

    def __init__(self):
        self.graphs: dict[tuple, nn.Module] = {}

    def run(self, system: System, scheme: Scheme, x: Tensor, state: State, dt: float, unfolds: int,
            lags: tuple[int, ...]) -> tuple[Tensor, State]:
        if x.device.type != "cuda":
            raise ValueError(f"engine: 'cuda-graph' needs CUDA tensors, got x on {x.device}")
        key = (tuple(x.shape), x.dtype, x.device, x.requires_grad, tuple(s.requires_grad for s in state),
               tuple(s.shape for s in state), torch.is_grad_enabled(), dt, unfolds, lags, scheme.name)
        graphed = self.graphs.get(key)
        if graphed is None:
            loop = _Loop(system, scheme, dt, unfolds, lags)
            samples = (x.detach().clone().requires_grad_(x.requires_grad),
                       *(s.detach().clone().requires_grad_(s.requires_grad) for s in state))
            graphed = torch.cuda.make_graphed_callables(loop, samples)
            self.graphs[key] = graphed
        result = graphed(x, *state)
        return result[0], tuple(result[1:])
