"""Per-sample steps (irregular sampling, ``Recurrent.forward(x, dt=gaps)``) as the fused kernels take them."""
from __future__ import annotations

import torch


def per_step_lengths(dt, unfolds: int, dtype) -> tuple[torch.Tensor | None, float]:
    """``(hs, h)`` for a kernel: with ``dt`` a (B, T) tensor of per-sample gaps, hs = each sub-step's length
    (B, T·L) (every sample's gap split into ``unfolds`` equal sub-steps, the input held; contiguous, without
    gradient: the gaps are data) and h = 0; with a float dt, (None, dt / unfolds)."""
    if isinstance(dt, torch.Tensor) and dt.dim() == 2:
        return (dt.detach() / unfolds).to(dtype).repeat_interleave(unfolds, dim=1).contiguous(), 0.0
    return None, float(dt) / unfolds
