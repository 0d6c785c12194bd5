"""Frequency classification (Erichson et al. 2025, §5, Table 5, after Moreno-Pino et al. 2024).

100 classes with frequencies f_j = 1 + (j − 1)(2¹² − 1)/99, j = 1..100 (eq. 21: 1 Hz to 4096 Hz, linearly spaced);
a sample of class j is X_j(t_n) = cos(2π f_j t_n) + σ ε_n, ε_n ~ N(0, 1) i.i.d., at L = 1000 times t_n; 10 samples
per class (1000 sequences); σ ∈ {0, 0.1} (``noise``). The target is the class (0-based index j − 1), read from the
model's output at the last step (``target="last"``). Chance accuracy is 1 %.

Where the paper is silent (our choices):

* times: "1000 time steps in [0, 1]" read as the equally spaced t_n = n/999, n = 0..999 (``np.linspace(0, 1,
  1000)``: Δt = 1/999, both ends included), not random times and not Δt = 1/1000;
* no random phase or amplitude (the paper has none): without noise the samples of a class are identical;
* aliasing: every f_j above the Nyquist frequency 499.5 Hz is sampled as its folded frequency
  |f_j − k/Δt| ≤ 499.5 Hz (cos is even); the folded frequencies stay distinct, the closest two (j = 72 and 99)
  0.55 Hz apart (with Δt = 1/1000: j = 49 and 98, 0.27 Hz apart);
* split: class-stratified, each class's 10 samples in the order drawn go 6 / 2 / 2 to train / validation / test
  (600 / 200 / 200 sequences); the noise ε comes from one ``torch.Generator`` seeded with ``seed``, splits in that
  order (i.i.d. draws, so this equals a random stratified split). The paper gives no split; its accuracies have a
  resolution of 0.1 %, finer than a test set of 200 sequences gives.

Generated in milliseconds in float64 (the phase 2π f t reaches 2.6·10⁴ rad), stored as float32; not cached.
"""
from __future__ import annotations

import math

import torch

CLASSES = 100
SAMPLES = 1000  # L
PER_CLASS = (("train", 6), ("valid", 2), ("test", 2))  # 10 samples per class: 1000 sequences


def class_frequencies(classes: int = CLASSES) -> torch.Tensor:
    """f_j = 1 + (j − 1)(2¹² − 1)/(classes − 1), j = 1..classes (Erichson et al. 2025, eq. 21), float64, in Hz."""
    return 1.0 + torch.arange(classes, dtype=torch.float64) * (2.0**12 - 1.0) / (classes - 1)


def sample_times(samples: int = SAMPLES) -> torch.Tensor:
    """t_n = n/(samples − 1), n = 0..samples − 1: equally spaced on [0, 1], both ends included (float64)."""
    return torch.linspace(0.0, 1.0, samples, dtype=torch.float64)


def frequency(noise: float = 0.1, seed: int = 1234, per_class=PER_CLASS, samples: int = SAMPLES) -> dict:
    """``{split: (inputs (N, samples, 1) float32, classes (N,) int64)}``, N = 100 × the split's count in
    ``per_class``; within a split the sequences go class by class. ``noise`` is σ ≥ 0."""
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not math.isfinite(noise) or noise < 0:
        raise ValueError(f"noise: expected a finite number >= 0 (σ, the standard deviation), got {noise!r}")
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 2:
        raise ValueError(f"samples: expected an integer >= 2, got {samples!r}")
    counts = dict(per_class)
    if any(not isinstance(n, int) or n < 1 for n in counts.values()) or set(counts) != {"train", "valid", "test"}:
        raise ValueError(f"per_class: expected a positive count for each of train, valid, test, got {per_class!r}")
    generator = torch.Generator().manual_seed(seed)
    clean = torch.cos(2 * math.pi * class_frequencies()[:, None] * sample_times(samples)[None, :])  # (classes, L)
    data = {}
    for split, count in per_class:
        labels = torch.arange(CLASSES).repeat_interleave(count)
        eps = torch.randn(labels.numel(), samples, generator=generator, dtype=torch.float64)
        data[split] = ((clean[labels] + noise * eps).float().unsqueeze(-1), labels)
    return data


def chance_accuracy(data: dict) -> float:
    """Accuracy of a guess (or of always naming one class) on balanced classes: 1/100 (an accuracy, not an RMSE)."""
    return 1.0 / CLASSES
