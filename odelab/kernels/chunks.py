"""A fused sequence kernel's forward with no backward to come, in chunks of steps.

A training forward keeps what its backward reads: the encoding of every step (LEM: 4 H values a step, its
pre-activations) and every state. Without a backward (``torch.no_grad()``, or nothing requiring a gradient) only
the outputs need to outlive the call, so :func:`in_chunks` runs the sequence a chunk of steps at a time, each from
the previous chunk's final state, and copies each chunk's outputs into one (B, T, H) tensor: the peak is the
outputs plus one chunk's buffers (LEM at (1024, 1000, 256) on CUDA: about 6 state sequences of 1000 MiB in one
piece -- 4 of encoding, 2 of states -- against 1 plus 0.4 in chunks of 64 steps). The steps and their arithmetic
are the same; only the input projection is computed a chunk at a time.
"""
from __future__ import annotations

import functools

import torch
from torch import Tensor

from .gaps import is_per_sample

CHUNK_STATE_BYTES = 1 << 26  # a chunk's (B, steps·L, H) state sequence: 64 MiB (its encoding: up to 4 times that)


def held_encoding(u: Tensor, V: Tensor, b: Tensor, unfolds: int) -> Tensor:
    """V u_n + b, ``(B, T·L, H)`` contiguous, each sample's encoding repeated for the ``unfolds`` sub-steps it drives
    (encoded once: the encoding is row-wise); the reversible UnICORNN's forward and its recomputing backward."""
    enc = torch.nn.functional.linear(u, V, b)
    return (enc if unfolds == 1 else enc.repeat_interleave(unfolds, dim=1)).contiguous()


def needs_backward(system, x: Tensor, state) -> bool:
    """Whether autograd may ask for a backward: gradients enabled and x, the state (its delay history included) or
    a parameter requiring one."""
    return torch.is_grad_enabled() and (x.requires_grad or any(s.requires_grad for s in state)
                                        or any(h.requires_grad for h in getattr(state, "history", ()))
                                        or any(p.requires_grad for p in system.parameters()))


def add_history(enc: Tensor, history: Tensor | None, lag: int, W2: Tensor | None, column: int, start: int = 0,
                keep: Tensor | None = None) -> None:
    """A delay cell's steps that read states from before the sequence (``history``, ``(B, M, H)``, oldest first:
    ``solvers.recurrence.DelayedState``): step k (1-based) reads h_{k−1−lag}; for the steps k = start + 1 … of the
    encoding ``enc`` ``(B, steps, width)`` with k − 1 − lag < 0, W2 h_{k−1−lag} is added to the delayed branch's
    pre-activation (columns ``column`` … ``column + H``), where the kernel reads zero history, as at a first call.
    ``keep`` (state dropout, ``(B, steps of the whole sequence, 2, H)``): step k reads ``keep[:, k−1, 1]`` ⊙ h_{k−1−lag}."""
    if history is None or W2 is None:
        return
    first, last = start + 1, min(start + enc.shape[1], lag)  # the steps k that read before the sequence
    if first > last:
        return
    depth, width = history.shape[1], history.shape[2]
    past = history[:, depth - lag + first - 1:depth - lag + last]  # h_{first−1−lag} … h_{last−1−lag}
    if keep is not None:
        past = past * keep[:, first - 1:last, 1]
    enc[:, first - 1 - start:last - start, column:column + width] += past @ W2.t()


def delay_factors(drop: Tensor | None, x: Tensor, unfolds: int, hidden: int, lags: tuple[int, ...]) -> Tensor | None:
    """A delay kernel's state-dropout factors (``drop=``, ``kernels.registry.register``) checked against x, or None.
    Without a delay (``lags`` empty, τ = 0) the cell's delayed read is the state its step starts from, dropped by
    that state's factor (as in the generic loop, which drops the start alone): ``drop[:, :, 1]`` is then
    ``drop[:, :, 0]``."""
    if drop is None:
        return None
    expected = (x.shape[0], x.shape[1] * unfolds, 2, hidden)
    if tuple(drop.shape) != expected:
        raise ValueError(f"drop: expected factors of shape (batch, time · unfolds, 2, hidden) = {expected}, got "
                         f"{tuple(drop.shape)}")
    return drop.contiguous() if lags else drop[:, :, :1].expand(-1, -1, 2, -1).contiguous()


def steps_per_chunk(x: Tensor, unfolds: int, hidden: int) -> int:
    """Samples of x (B, T, n) per chunk: a (B, steps·L, hidden) state sequence of about :data:`CHUNK_STATE_BYTES`."""
    return max(1, CHUNK_STATE_BYTES // (max(x.shape[0] * unfolds * hidden, 1) * x.element_size()))


def in_chunks(run):
    """``run(system, x, state, dt, unfolds, lags, **options) -> (outputs (B, T, H), final state)`` of a cell whose
    state carries everything the next step needs (``dt`` a float or (B, T) per-sample gaps), run in chunks of
    :func:`steps_per_chunk` samples where no backward can come; unchanged otherwise. (The delay cells' steps read
    states m steps back: ``cuda.delay_gru`` chunks its own.)"""

    @functools.wraps(run)
    def chunked(system, x, state, dt, unfolds=1, lags=(), **options):
        steps = steps_per_chunk(x, unfolds, system.hidden_size)
        if steps >= x.shape[1] or needs_backward(system, x, state):
            return run(system, x, state, dt, unfolds, lags, **options)
        out = None
        for t0 in range(0, x.shape[1], steps):
            # contiguous: the input projection of a strided slice is a product and a separate bias sum, two buffers
            piece = dt[:, t0:t0 + steps] if is_per_sample(dt) else dt
            ys, state = run(system, x[:, t0:t0 + steps].contiguous(), state, piece, unfolds, lags, **options)
            if out is None:
                out = ys.new_empty(x.shape[0], x.shape[1], ys.shape[-1])
            out[:, t0:t0 + steps] = ys
        return out, state

    return chunked
