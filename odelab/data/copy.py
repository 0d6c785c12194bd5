"""The copy task (Erichson et al. 2025, App. F.1, Fig. 7: memorise 10 symbols over T = 1000 steps), in the standard
layout of Arjovsky et al. 2016, §4.1, which the paper does not spell out (our assumption).

Alphabet: 0 = blank, 1..8 = the data symbols, 9 = the delimiter; inputs are one-hot (10 features). A sequence has
T + 20 steps: 10 symbols drawn uniformly from 1..8, T − 1 blanks, the delimiter, 10 blanks. The target is a class
at every step (``target="sequence"``): T + 10 blanks, then the 10 symbols in their order. So symbol k (0-based step
k < 10) is due at step T + 10 + k, T + 10 steps later.

The memoryless strategy -- blanks, then a uniform guess among the 8 symbols once the delimiter has passed -- has
the mean cross-entropy 10 log 8 / (T + 20) nats per step: the bar a model must beat (0.0204 for T = 1000).

Like the adding task, fixed sets instead of a fresh batch per step (ours): 2000 train / 200 validation / 500 test
sequences, from one ``torch.Generator`` seeded with ``seed``, splits in that order; the one-hot inputs are expanded
from the stored symbols (not cached: the draw takes milliseconds).
"""
from __future__ import annotations

import math

import torch
from torch.nn import functional as F

BLANK, DELIMITER, SYMBOLS, REMEMBER = 0, 9, 8, 10
ALPHABET = 10  # blank, 8 symbols, delimiter: input features and output classes
SPLITS = (("train", 2000), ("valid", 200), ("test", 500))


def copy_layout(symbols: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input classes (N, length + 20), target classes (N, length + 20)) int64 for ``symbols`` (N, 10) in 1..8."""
    count = symbols.shape[0]
    inputs = torch.full((count, length + 2 * REMEMBER), BLANK, dtype=torch.int64)
    targets = torch.full_like(inputs, BLANK)
    inputs[:, :REMEMBER] = symbols
    inputs[:, length + REMEMBER - 1] = DELIMITER
    targets[:, length + REMEMBER:] = symbols
    return inputs, targets


def copy_task(length: int = 1000, seed: int = 1234, sizes=SPLITS) -> dict:
    """``{split: (one-hot inputs (N, length + 20, 10) float32, target classes (N, length + 20) int64)}``;
    ``length`` is T >= 1, the blank steps between the last symbol and its output minus 10."""
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"length: expected an integer >= 1 (T, the delay to recall over), got {length!r}")
    generator = torch.Generator().manual_seed(seed)
    data = {}
    for split, count in sizes:
        symbols = torch.randint(1, SYMBOLS + 1, (count, REMEMBER), generator=generator)
        inputs, targets = copy_layout(symbols, length)
        data[split] = (F.one_hot(inputs, ALPHABET).float(), targets)
    return data


def memoryless_cross_entropy(length: int) -> float:
    """10 log 8 / (T + 20): mean cross-entropy per step of blanks, then a uniform guess among the 8 symbols."""
    return REMEMBER * math.log(SYMBOLS) / (length + 2 * REMEMBER)


def recalled_accuracy(logits: torch.Tensor, data: dict) -> float:
    """Test accuracy on the 10 recalled symbols only (the last 10 steps), the part the blanks do not dilute."""
    targets = data["test"][1]
    return float((logits[:, -REMEMBER:].argmax(-1) == targets[:, -REMEMBER:]).double().mean())
