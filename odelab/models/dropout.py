"""Dropout for sequences ``(batch, time, features)``: one mask per sequence shared by every step (variational
dropout, Gal & Ghahramani 2016; UnICORNN's ``Dropout_overtime``), or a fresh mask at every step (``nn.Dropout``
on the whole tensor, as LEM's Google12 code applies its input dropout)."""
from __future__ import annotations

import math

from torch import Tensor, nn


class SequenceDropout(nn.Module):
    """Zero each feature with probability ``p`` and scale the rest by 1/(1 − p) while training; the identity in
    eval mode. ``shared_over_time=True``: the mask is drawn once per (sequence, feature) and used at every step."""

    def __init__(self, p: float = 0.0, shared_over_time: bool = True):
        super().__init__()
        if not (isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) and 0 <= p < 1):
            raise ValueError(f"dropout: expected a probability in [0, 1), got {p!r}")
        self.p, self.shared_over_time = float(p), bool(shared_over_time)

    def extra_repr(self) -> str:
        return f"p={self.p}, shared_over_time={self.shared_over_time}"

    def mask(self, x: Tensor) -> Tensor | None:
        """The factor x is multiplied by (0 or 1/(1 − p)): ``(batch, 1, features)`` when shared over time, else x's
        shape; None in eval mode or with p = 0."""
        if not self.training or self.p == 0.0:
            return None
        if x.dim() != 3:
            raise ValueError(f"dropout: expected a (batch, time, features) tensor, got shape {tuple(x.shape)}")
        shape = (x.shape[0], 1, x.shape[2]) if self.shared_over_time else x.shape
        return x.new_empty(shape).bernoulli_(1.0 - self.p) / (1.0 - self.p)

    def forward(self, x: Tensor) -> Tensor:
        factor = self.mask(x)
        return x if factor is None else x * factor
