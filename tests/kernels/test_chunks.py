"""``odelab.kernels.chunks.in_chunks``: a sequence kernel's forward with no backward to come, a chunk of steps at a
time, written against a running sum whose chunks must chain through the state."""
from __future__ import annotations

import torch
from torch import nn

from odelab.kernels import chunks


class Summing(nn.Module):
    hidden_size = 2

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))


def running_sum(system, x, state, dt, unfolds=1, lags=(), **options):
    """y_n = y_{n−1} + dt · x_n (each of ``unfolds`` sub-steps adds dt/L · x_n): outputs (B, T, 2), final (y_T,)."""
    steps = torch.cumsum(x * dt, dim=1) + state[0][:, None]
    running_sum.calls.append((x.shape[1], options))
    return steps * system.scale, (steps[:, -1] * system.scale,)


def test_chunks_chain_through_the_state(monkeypatch):
    monkeypatch.setattr(chunks, "steps_per_chunk", lambda x, unfolds, hidden: 4)
    running_sum.calls = []
    system, x, state = Summing(), torch.randn(3, 10, 2), (torch.randn(3, 2),)
    expected = torch.cumsum(x * 0.5, dim=1) + state[0][:, None]
    with torch.no_grad():
        out, (final,) = chunks.in_chunks(running_sum)(system, x, state, 0.5, 1, (), block_h=16)
    assert [n for n, _ in running_sum.calls] == [4, 4, 2]
    assert all(options == {"block_h": 16} for _, options in running_sum.calls)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(final, expected[:, -1])


def test_one_piece_where_a_backward_may_come(monkeypatch):
    """Gradients enabled and a parameter requiring one (or the input, or the state): the whole sequence at once."""
    monkeypatch.setattr(chunks, "steps_per_chunk", lambda x, unfolds, hidden: 4)
    running_sum.calls = []
    system, x, state = Summing(), torch.randn(3, 10, 2), (torch.randn(3, 2),)
    chunks.in_chunks(running_sum)(system, x, state, 0.5)
    system.scale.requires_grad_(False)
    chunks.in_chunks(running_sum)(system, x.requires_grad_(), state, 0.5)
    assert [n for n, _ in running_sum.calls] == [10, 10]
    with torch.no_grad():
        chunks.in_chunks(running_sum)(system, x, state, 0.5)
    assert [n for n, _ in running_sum.calls] == [10, 10, 4, 4, 2]


def test_steps_per_chunk():
    """About CHUNK_STATE_BYTES of (B, steps·L, H) state sequence a chunk, at least one step."""
    x = torch.empty(1024, 1000, 1)
    assert chunks.steps_per_chunk(x, 1, 256) == chunks.CHUNK_STATE_BYTES // (1024 * 256 * 4) == 64
    assert chunks.steps_per_chunk(x, 6, 256) == 10
    assert chunks.steps_per_chunk(x.double(), 1, 256) == 32
    assert chunks.steps_per_chunk(torch.empty(1 << 20, 5, 1), 1, 1 << 10) == 1
