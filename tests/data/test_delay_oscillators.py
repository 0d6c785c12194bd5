"""ENSO / Mackey--Glass readings: ``horizon`` H kept nodes ahead at ``stride`` k (odelab.data.delay_oscillators).

The reference is the solved series itself (``delay_trajectories``, checked against scipy in test_tasks.py): kept
node j is series node j·k, input n is kept node n, target n is kept node n + H."""
import hashlib
import json

import numpy as np
import pytest
import torch

import odelab.data.delay_oscillators as delay
from odelab.data import enso, mackey_glass

TINY = (("train", 2), ("valid", 1), ("test", 2))
SHORT = 31


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _series(name, seed=5):
    x0 = delay.initial_values(seed, TINY)
    return delay.delay_trajectories(name, np.concatenate(list(x0.values())), SHORT).float()  # (5, SHORT)


@pytest.mark.parametrize("generate, name", [(enso, "enso"), (mackey_glass, "mackey-glass")])
@pytest.mark.parametrize("horizon, stride", [(1, 1), (1, 3), (4, 1), (2, 3), (3, 7), (3, 8)])
def test_inputs_and_targets_are_the_series_at_the_kept_nodes(generate, name, horizon, stride):
    series = _series(name)
    data = generate(seed=5, sizes=TINY, samples=SHORT, horizon=horizon, stride=stride)
    kept = len(range(0, SHORT, stride))  # nodes 0, k, 2k, ... <= 30
    offset = 0
    for split, n in TINY:
        x, y = data[split]
        assert x.shape == y.shape == (n, kept - horizon, 1)
        for i in range(n):
            for j in range(kept - horizon):
                assert x[i, j, 0] == series[offset + i, j * stride]
                assert y[i, j, 0] == series[offset + i, (j + horizon) * stride]
        offset += n


def test_target_is_the_input_shifted_by_the_horizon():
    x, y = enso(seed=5, sizes=TINY, samples=SHORT, horizon=5, stride=2)["train"]
    assert torch.equal(x[:, 5:], y[:, :-5])
    assert not torch.equal(x[:, 4:], y[:, :-4])  # a wrong shift would show


def test_defaults_are_the_one_step_data_and_keep_their_cache_key(cache_dir):
    series = _series("enso")
    data = enso(seed=5, sizes=TINY, samples=SHORT)
    assert data.keys() == {"train", "valid", "test"}
    assert torch.equal(data["train"][0][..., 0], series[:2, :-1]) and torch.equal(data["train"][1][..., 0], series[:2, 1:])
    assert torch.equal(data["test"][1][..., 0], series[3:, 1:])
    explicit = enso(seed=5, sizes=TINY, samples=SHORT, horizon=1, stride=1)
    assert all(torch.equal(a, b) for k in data for a, b in zip(data[k], explicit[k]))
    # the key written before these options existed: sha256 of the sorted JSON config, first 16 hex digits
    config = {"samples": SHORT, "seed": 5, "sizes": [list(s) for s in TINY], "version": 1}
    key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    assert sorted(p.name for p in cache_dir.iterdir()) == [f"enso-{key}.pt"]


def test_other_readings_are_sliced_from_the_one_step_cache(cache_dir, monkeypatch):
    first = mackey_glass(seed=5, sizes=TINY, samples=SHORT, horizon=3, stride=2)
    names = sorted(p.name for p in cache_dir.iterdir())
    assert len(names) == 1  # only the one-step data set is stored
    monkeypatch.setattr(delay, "delay_trajectories", lambda *a: pytest.fail("solved again"))
    again = mackey_glass(seed=5, sizes=TINY, samples=SHORT, horizon=3, stride=2)
    assert all(torch.equal(a, b) for k in first for a, b in zip(first[k], again[k]))
    assert sorted(p.name for p in cache_dir.iterdir()) == names


def test_uncached_readings_match_cached_ones():
    a = enso(seed=5, sizes=TINY, samples=SHORT, horizon=2, stride=4, cache=False)
    b = enso(seed=5, sizes=TINY, samples=SHORT, horizon=2, stride=4)
    assert all(torch.equal(u, v) for k in a for u, v in zip(a[k], b[k]))


@pytest.mark.parametrize("options, match", [
    ({"horizon": 0}, "horizon"), ({"horizon": -2}, "horizon"), ({"stride": 0}, "stride"), ({"horizon": 1.5}, "horizon"),
    ({"stride": True}, "stride"), ({"horizon": SHORT}, "nothing left to predict"),
    ({"horizon": 4, "stride": 8}, "nothing left to predict"),  # nodes 0, 8, 16, 24: 4 kept, none 4 ahead
])
def test_invalid_readings_raise(options, match):
    with pytest.raises(ValueError, match=match):
        enso(seed=5, sizes=TINY, samples=SHORT, cache=False, **options)


def test_longest_valid_horizon():
    x, y = enso(seed=5, sizes=TINY, samples=SHORT, horizon=3, stride=8, cache=False)["valid"]  # 4 kept nodes
    assert x.shape == y.shape == (1, 1, 1)
    x, y = enso(seed=5, sizes=TINY, samples=SHORT, horizon=SHORT - 1, cache=False)["valid"]
    assert x.shape == (1, 1, 1) and torch.equal(x[0, 0], enso(seed=5, sizes=TINY, samples=SHORT)["valid"][0][0, 0])
    assert torch.equal(y[0, 0], enso(seed=5, sizes=TINY, samples=SHORT)["valid"][1][0, -1])
