"""Sequences of different lengths in one batch, as ``torch.nn.utils.rnn.pack_padded_sequence`` gives cuDNN.

``run_lengths(run, x, state, lengths)`` runs ``run(x_part, state_part) -> (outputs, final_state)`` over the samples
sorted by length, longest first, one piece of time at a time: from one distinct length to the next, only the
samples still running (a prefix of the sorted batch) continue, from their states at the end of the previous piece.
So sample b's final state is its state after ``lengths[b]`` steps, and its outputs past that are zeros (the padding
of ``pad_packed_sequence``). Each piece is an ordinary call (a fused kernel where one exists); a delay system's
pieces continue through its ``DelayedState``, so the delayed reads are those of one call per sample. The outputs
before a sample's length do not depend on what is padded after it, so nothing else changes.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..solvers.recurrence import DelayedState


def check_lengths(lengths, batch: int, steps: int) -> Tensor:
    """``lengths`` as an int64 tensor on the CPU: one length per sample, each in 1 … ``steps``."""
    if isinstance(lengths, Tensor):
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dim() != 1:
            raise TypeError(f"lengths: expected a 1-D integer tensor or a list of ints, got {lengths.dtype} of shape "
                            f"{tuple(lengths.shape)}")
    elif not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths):
        raise TypeError("lengths: expected a 1-D integer tensor or a list of ints")
    lengths = torch.as_tensor(lengths, dtype=torch.int64).cpu()
    if lengths.numel() != batch:
        raise ValueError(f"lengths: expected one length per sample ({batch}), got {lengths.numel()}")
    if batch and not (int(lengths.min()) >= 1 and int(lengths.max()) <= steps):
        raise ValueError(f"lengths: expected lengths in 1 … {steps} (x's steps), got {int(lengths.min())} … "
                         f"{int(lengths.max())}")
    return lengths


def map_state(state, fn):
    """``fn`` on every tensor of a state: a tensor, a tuple of blocks, a DelayedState (its history too) or a list or
    tuple of them."""
    if isinstance(state, Tensor):
        return fn(state)
    if isinstance(state, DelayedState):
        return DelayedState(tuple(fn(b) for b in state), tuple(fn(h) for h in state.history))
    if isinstance(state, list):
        return [map_state(s, fn) for s in state]
    return tuple(map_state(b, fn) for b in state)


def _join(parts: list, fn):
    """The states ``parts`` (of one structure) joined tensor by tensor with ``fn(list of tensors)``."""
    first = parts[0]
    if isinstance(first, DelayedState):
        return DelayedState(tuple(fn([p[i] for p in parts]) for i in range(len(first))),
                            tuple(fn([p.history[i] for p in parts]) for i in range(len(first.history))))
    if isinstance(first, list):
        return [_join([p[i] for p in parts], fn) for i in range(len(first))]
    return tuple(fn([p[i] for p in parts]) for i in range(len(first)))


def run_lengths(run: Callable, x: Tensor, state, lengths: Tensor, *aligned: Tensor):
    """(outputs ``(batch, time, ·)`` with zeros past each sample's length, final states at each length).
    ``aligned``: more ``(batch, time, …)`` tensors (e.g. per-sample time gaps), cut into the same pieces as x and
    handed to ``run(x_part, state_part, *aligned_parts)``."""
    B, T = x.shape[:2]
    order = torch.argsort(lengths, descending=True, stable=True)
    sorted_lengths = lengths[order].tolist()
    order = order.to(x.device)
    x, state = x.index_select(0, order), map_state(state, lambda t: t.index_select(0, order))
    aligned = tuple(a.index_select(0, order) for a in aligned)
    outputs, finals, start, active = [], [], 0, B
    for end in sorted(set(sorted_lengths)):
        part, state = run(x[:active, start:end], state, *(a[:active, start:end] for a in aligned))
        if active < B:  # the samples already finished: zeros, as pad_packed_sequence pads
            part = torch.cat((part, part.new_zeros(B - active, *part.shape[1:])), dim=0)
        outputs.append(part)
        running = sum(n > end for n in sorted_lengths)  # a prefix of the sorted batch
        finals.append(map_state(state, lambda t, a=running: t[a:]))
        state, start, active = map_state(state, lambda t, a=running: t[:a]), end, running
    if start < T:
        outputs.append(outputs[-1].new_zeros(B, T - start, *outputs[-1].shape[2:]))
    inverse = torch.argsort(order)
    out = torch.cat(outputs, dim=1).index_select(0, inverse)
    final = _join(finals[::-1], lambda ts: torch.cat(ts, dim=0).index_select(0, inverse))
    return out, final
