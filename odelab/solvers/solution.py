"""The result of a solve: output times, states per block, per-sample statistics and status."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import torch
from torch import Tensor

from .blocks import ByBlock
from .dense import DenseOutput
from .events import Event


class Status(IntEnum):
    """Per-sample outcome of a solve."""

    SUCCESS = 0
    MAX_STEPS = 1
    STEP_UNDERFLOW = 2
    NONFINITE = 3


class SolveError(RuntimeError):
    """Raised (with ``throw=True``) when some samples failed; ``.solution`` holds the partial solution."""

    def __init__(self, message: str, solution: "Solution"):
        super().__init__(message)
        self.solution = solution


@dataclass
class Solution(ByBlock):
    """``ts`` (len(t),); ``ys`` one tensor per state block, batch first ``(batch, len(t), size)``;
    ``stats`` per-sample tensors (``steps``, ``accepted``, ``rejected``, ``nfe``); ``status`` per-sample
    :class:`Status` codes. Index by block name (``sol["y"]``); ``sol.y`` is the state of a one-block system.
    ``dense_output``: the steps' interpolants (:class:`.dense.DenseOutput`) of a solve with ``dense=True``, read
    by :meth:`evaluate`. ``event``: each sample's first event (:class:`.events.Event`) of a solve with ``event=``."""

    ts: Tensor
    ys: tuple[Tensor, ...]
    blocks: tuple[str, ...]
    stats: dict[str, Tensor] = field(default_factory=dict)
    status: Tensor | None = None
    dense_output: "DenseOutput | None" = None
    event: Event | None = None

    def evaluate(self, t) -> tuple[Tensor, ...]:
        """The state at any time(s) ``t`` between the first and last output time, one tensor per block, from the
        steps' interpolants: a number gives blocks ``(batch, size)``; J times (a 1-D sequence or tensor) give
        ``(batch, J, size)``; a ``(batch, J)`` tensor gives each sample at its own times. Needs a solve with
        ``dense=True``; differentiable (in the solve's parameters, y0 and a tensor ``t``)."""
        if self.dense_output is None:
            raise ValueError("evaluate: this solution keeps its output times only; solve with dense=True to "
                             "evaluate it between them")
        return self.dense_output.evaluate(t)

    @property
    def success(self) -> Tensor:
        return self.status == Status.SUCCESS

    def failure_summary(self) -> str:
        """One line per failure kind: how many samples, which (first few), and at what time they stopped."""
        lines = []
        for code in Status:
            if code is Status.SUCCESS:
                continue
            idx = torch.nonzero(self.status == code).flatten().tolist()
            if idx:
                shown = ", ".join(map(str, idx[:8])) + (", ..." if len(idx) > 8 else "")
                where = ""
                if "t_final" in self.stats:
                    where = f" (stopped at t = {self.stats['t_final'][idx[0]].item():.6g} for sample {idx[0]})"
                lines.append(f"{len(idx)} sample(s) {code.name.lower().replace('_', ' ')}: [{shown}]{where}")
        return "; ".join(lines)


def newly_overflowed(blocks: tuple[Tensor, ...], dead: Tensor | None) -> Tensor | None:
    """The retired samples ``dead`` (B, 1) grown by those whose ``blocks`` hold a non-finite value, where one of
    them is new (one host read); None where none is. The fixed-step drivers retire such samples under gradients."""
    bad = ~torch.stack([torch.isfinite(b).all(1) for b in blocks]).all(0, keepdim=True).T
    if not bool((bad if dead is None else bad & ~dead).any()):
        return None
    return bad if dead is None else bad | dead


def finish(system, t_tensor: Tensor, outputs: list[tuple[Tensor, ...]], steps, nfe, extra_stats=None, status=None,
           stacked: tuple[Tensor, ...] | None = None, dense_output: DenseOutput | None = None) -> Solution:
    """Stack recorded states batch-first (``stacked``: already so) and attach per-sample stats and status
    (non-finite detection), and the dense output if one was kept."""
    ys = stacked if stacked is not None else tuple(torch.stack(block, dim=1) for block in zip(*outputs))
    batch, device = ys[0].shape[0], ys[0].device
    finite = torch.stack([torch.isfinite(y).flatten(1).all(1) for y in ys]).all(0)
    if status is None:
        status = torch.full((batch,), int(Status.SUCCESS), dtype=torch.int64, device=device)
    status = torch.where(finite, status, torch.full_like(status, int(Status.NONFINITE)))
    as_tensor = lambda v: v if isinstance(v, Tensor) else torch.full((batch,), int(v), dtype=torch.int64, device=device)
    stats = {"steps": as_tensor(steps), "accepted": as_tensor(steps), "rejected": as_tensor(0), "nfe": as_tensor(nfe)}
    stats.update(extra_stats or {})
    return Solution(ts=t_tensor, ys=ys, blocks=system.blocks, stats=stats, status=status, dense_output=dense_output)
