"""The adding problem (Rusch et al. 2022, §5.1, Erichson et al. 2025, §5; the recipe is documented in docs/references.md).

Input: a sequence of length N with two channels, u_n ~ U(0, 1) and a marker m_n that is 1 at exactly two
positions, one in each half -- i ∈ [0, ⌊N/2⌋), j ∈ [⌊N/2⌋, N) (official LEM code) -- and 0 elsewhere.
Target: u_i + u_j, read from the model's output at the LAST step only (``target="last"``). Predicting the
constant 1 leaves MSE 1/6 (RMSE 0.408), the bar a model must beat.

The papers draw a fresh batch every optimisation step; we draw fixed sets instead (our choice), so that
epochs, validation-based model selection and resume work as for the other tasks: 5000 train / 500
validation / 1000 test sequences (1000 = the official test batch), all from one ``torch.Generator``
seeded with ``seed``, splits in that order. The cache stores u and the marker positions only.
"""
from __future__ import annotations

import torch

from .cache import cached

SPLITS = (("train", 5000), ("valid", 500), ("test", 1000))


def _draw(length: int, count: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    values = torch.rand(count, length, generator=generator)
    first = torch.randint(0, length // 2, (count,), generator=generator)
    second = torch.randint(length // 2, length, (count,), generator=generator)
    return {"values": values, "marks": torch.stack([first, second], 1)}


def _expand(values: torch.Tensor, marks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs (N, length, 2), targets (N, 1)) from u and the marker positions."""
    markers = torch.zeros_like(values).scatter_(1, marks, 1.0)
    targets = values.gather(1, marks).sum(1, keepdim=True)
    return torch.stack([values, markers], -1), targets


def adding(length: int = 2000, seed: int = 1234, sizes=SPLITS, cache: bool = True) -> dict:
    """``{split: (inputs (N, length, 2), targets (N, 1))}`` float32."""
    if not isinstance(length, int) or isinstance(length, bool) or length < 2:
        raise ValueError(f"length: expected an integer >= 2, got {length!r}")

    def build():
        generator = torch.Generator().manual_seed(seed)
        return {name: _draw(length, n, generator) for name, n in sizes}

    raw = build() if not cache else cached("adding", dict(length=length, seed=seed, sizes=list(sizes), version=1),
                                           build)
    return {name: _expand(part["values"], part["marks"]) for name, part in raw.items()}
