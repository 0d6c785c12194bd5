"""Per-sample steps (irregular sampling, ``Recurrent.forward(x, dt=gaps)``) as the fused kernels take them."""
from __future__ import annotations

import torch


def is_per_sample(dt) -> bool:
    """Whether ``dt`` is a (B, T) tensor of per-sample gaps (else one float step for every sample)."""
    return isinstance(dt, torch.Tensor) and dt.dim() == 2


def sample_lengths(gaps: torch.Tensor, unfolds: int, dtype, keep_grad: bool = False) -> torch.Tensor:
    """Each sample's sub-step length gap / L, (B, T), contiguous: for kernels that unfold a sample's ``unfolds``
    sub-steps themselves (the liquid cells); without gradient unless ``keep_grad`` (a kernel whose backward gives
    it)."""
    return ((gaps if keep_grad else gaps.detach()) / unfolds).to(dtype).contiguous()


def per_step_lengths(dt, unfolds: int, dtype, keep_grad: bool = False) -> tuple[torch.Tensor | None, float]:
    """``(hs, h)`` for a kernel that runs the repeated input: with per-sample gaps (:func:`is_per_sample`), hs = each
    sub-step's length (B, T·L) (every sample's gap split into ``unfolds`` equal sub-steps, the input held; with the
    gaps' gradient if ``keep_grad``, for a kernel whose backward returns it: ``kernels.registry.register``'s
    ``gap_grads``) and h = 0; with a float dt, (None, dt / unfolds)."""
    if is_per_sample(dt):
        return sample_lengths(dt, unfolds, dtype, keep_grad).repeat_interleave(unfolds, dim=1).contiguous(), 0.0
    return None, float(dt) / unfolds
