"""Stateful training and evaluation (``TrainConfig.stateful``): consecutive windows of one stream read as parallel
streams whose states carry from batch to batch -- truncated back-propagation through time, as language models
train. The reference runs each stream's windows joined into one sequence."""
import math

import pytest
import torch
from torch import nn

from odelab.models import SequenceRegressor, baselines, cells
from odelab.training.loop import TrainConfig, classification_scores, fit, rmse, stripes


@pytest.mark.parametrize("n, count, expected", [
    (10, 4, [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]),
    (10, 6, [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]),
    (3, 1, [[0], [1], [2]]),
    (2, 5, [[0, 1]]),
    (0, 3, []),
])
def test_stripes_read_consecutive_windows_as_parallel_streams(n, count, expected):
    assert [b.tolist() for b in stripes(n, count)] == expected


def token_model(body):
    torch.manual_seed(0)
    return SequenceRegressor(body, 5, 7, vocabulary=7, embedding_size=3).double()


@pytest.mark.parametrize("body", [lambda: cells.LEM(3, 5, dt=0.5), lambda: baselines.LSTM(3, 5)])
def test_stateful_evaluation_equals_each_stream_read_in_one_piece(body):
    model = token_model(body()).eval()
    windows, length = 11, 4
    g = torch.Generator().manual_seed(1)
    stream = torch.randint(1, 7, (windows * length + 1,), generator=g)
    x = stream[:-1].reshape(windows, length)
    y = (stream[1:] - 1).reshape(windows, length)
    loss, accuracy = classification_scores(model, x, y, batch_size=4, device="cpu", stateful=True)
    total, correct = 0.0, 0
    with torch.no_grad():
        for batch_of_one_stream in stripes(windows, 4)[0]:  # stream b: windows b·S … b·S + S − 1, S = 3
            ids = torch.arange(batch_of_one_stream, min(batch_of_one_stream + 3, windows))
            logits = model(x[ids].reshape(1, -1))[0]  # the stream's windows joined: one sequence from zero
            total += float(nn.functional.cross_entropy(logits, y[ids].reshape(-1), reduction="sum"))
            correct += int((logits.argmax(-1) == y[ids].reshape(-1)).sum())
    assert loss == pytest.approx(total / y.numel(), rel=1e-12)
    assert accuracy == correct / y.numel()
    plain, _ = classification_scores(model, x, y, batch_size=4, device="cpu")
    assert plain != pytest.approx(loss, rel=1e-6)  # from zero at every window: another number


def test_carried_states_are_detached_and_cut_to_the_streams_still_running():
    model = token_model(baselines.LSTM(3, 5))
    _, (h, c) = model.stream(torch.randint(1, 7, (4, 3)))
    assert h.requires_grad
    kept = model.carried((h, c), rows=3)
    assert [tuple(t.shape) for t in kept] == [(1, 3, 5), (1, 3, 5)] and not kept[0].requires_grad
    assert torch.equal(kept[0], h[:, :3])
    lem = token_model(cells.LEM(3, 5, dt=0.5))
    _, state = lem.stream(torch.randint(1, 7, (4, 3)))
    assert [tuple(t.shape) for t in lem.carried(state, 2)] == [(2, 5), (2, 5)]


def test_stateful_training_learns_a_stream_that_needs_the_carried_state():
    """Windows of two tokens of the stream 1 1 2 1 1 2 …: after a 1 the next token depends on the token before it. At
    a window's second step the first one is in the state; at its first step only the state carried from the
    previous window knows (without it: right on every 2 and half the 1s there, about 83 % overall)."""
    cycle = torch.tensor([1, 1, 2] * 40 + [1])
    x = cycle[:-1].reshape(-1, 2)
    y = (cycle[1:] - 1).reshape(-1, 2)
    data = {"train": (x, y), "valid": (x, y), "test": (x, y)}
    scores = {}
    for stateful in (True, False):
        torch.manual_seed(3)
        model = SequenceRegressor(baselines.GRU(4, 16), 16, 3, vocabulary=4, embedding_size=4)
        result = fit(model, data, TrainConfig(epochs=30, lr=0.05, batch_size=4, stateful=stateful),
                     progress=False, loss="cross_entropy")
        scores[stateful] = result["test_accuracy"]
    assert scores[True] > 0.97 and scores[False] < 0.9
    assert math.isfinite(rmse(SequenceRegressor(cells.LEM(2, 3), 3, 2), torch.randn(5, 2, 2), torch.randn(5, 2, 2),
                              2, "cpu", stateful=True))


def test_stateful_training_needs_a_model_that_streams():
    data = {split: (torch.randn(4, 3, 2), torch.randn(4, 3, 1)) for split in ("train", "valid", "test")}
    with pytest.raises(ValueError, match="model.stream"):
        fit(nn.Linear(2, 1), data, TrainConfig(epochs=1, stateful=True), progress=False)
    last = SequenceRegressor(cells.LEM(2, 3), 3, 1, last=True)
    with pytest.raises(ValueError, match="one value per sequence"):
        last.stream(torch.randn(2, 3, 2))
