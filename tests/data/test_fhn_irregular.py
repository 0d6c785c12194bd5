"""FitzHugh–Nagumo observed at irregular times (``fhn-irregular``): every sample where an independent scipy solve
puts it, the recipe of odelab/data/fhn.py (initial values as the official generator, gaps U[0.04, 0.76] from
``default_rng([seed, 1])``), and the task wiring of ``time_gaps``."""
import json

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import odelab.data.tasks
from odelab.cli import main
from odelab.data.fhn import fitzhugh_nagumo_irregular, irregular_extrapolation_rmse, irregular_persistence_rmse
from odelab.data.tasks import TASKS
from odelab.training import build_regressor

SIZES = (("train", 2), ("valid", 1), ("test", 2))


def test_samples_sit_on_the_trajectory_at_their_own_times():
    data = fitzhugh_nagumo_irregular(seed=7, sizes=SIZES, cache=False)
    rng = np.random.RandomState(7)
    c = [2.0 * rng.rand() - 1.0 for _ in range(5)]
    gaps = np.random.default_rng([7, 1]).uniform(0.04, 0.76, size=(5, 1000))
    x = torch.cat([data[s][0] for s, _ in SIZES])
    y = torch.cat([data[s][1] for s, _ in SIZES])
    assert x.shape == (5, 1000, 2) and y.shape == (5, 1000, 1) and x.dtype == torch.float32
    assert np.allclose(x[..., 1].numpy(), gaps, atol=1e-7)
    rhs = lambda t, s: [s[0] - s[0] ** 3 / 3 - s[1] + 0.5, 0.02 * (s[0] + 0.7 - 0.8 * s[1])]
    for k in (0, 2, 4):
        times = np.concatenate([[0.0], gaps[k].cumsum()])
        v = solve_ivp(rhs, [0, times[-1]], [c[k], 0.0], method="DOP853", t_eval=times, rtol=1e-12, atol=1e-12).y[0]
        assert np.abs(y[k, :, 0].numpy() - v[1:]).max() < 2e-5
        assert np.abs(x[k, :, 0].numpy() - v[:-1]).max() < 2e-5
    assert torch.equal(x[:, 1:, 0], y[:, :-1, 0])  # the next input is the last target


def test_baselines_from_their_formulas():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(3, 6, 1, generator=g)
    gaps = 0.1 + torch.rand(3, 5, 1, generator=g)
    x, y = torch.cat([v[:, :-1], gaps], -1), v[:, 1:]
    assert irregular_persistence_rmse(x, y) == pytest.approx(float(((v[:, 1:] - v[:, :-1]) ** 2).mean().sqrt()))
    guess = v[:, 1:-1] + gaps[:, 1:] * (v[:, 1:-1] - v[:, :-2]) / gaps[:, :-1]
    assert irregular_extrapolation_rmse(x, y) == pytest.approx(float(((guess - v[:, 2:]) ** 2).mean().sqrt()))


def test_the_cells_step_by_the_gap_and_the_baselines_read_it():
    task = TASKS["fhn-irregular"]
    assert task.time_gaps
    torch.manual_seed(5)
    lem = build_regressor(task, "lem", 2, 8, 1)
    torch.manual_seed(5)
    plain = build_regressor(TASKS["fhn"], "lem", 1, 8, 1)  # the probe draws nothing from the global stream
    assert lem.gaps_as_step and lem.body.system.input_size == 1
    assert all(torch.equal(a, b) for a, b in zip(lem.state_dict().values(), plain.state_dict().values()))
    lstm = build_regressor(task, "lstm", 2, 8, 1)
    assert not lstm.gaps_as_step and lstm.body.rnn.input_size == 2
    assert not build_regressor(task, "taugru", 2, 8, 1).gaps_as_step  # a delay cell reads the gap


def test_fit_runs_on_irregular_data(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    g = torch.Generator().manual_seed(1)
    tiny = {}
    for split, n in (("train", 6), ("valid", 3), ("test", 3)):
        v = torch.randn(n, 13, 1, generator=g)
        tiny[split] = (torch.cat([v[:, :-1], 0.2 + torch.rand(n, 12, 1, generator=g)], -1), v[:, 1:])
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn-irregular"], "load", lambda seed, **options: tiny)
    for model in ("lem", "lstm"):
        out = tmp_path / model
        assert main(["fit", "fhn-irregular", "--model", model, "--hidden", "3", "--epochs", "1", "--no-progress",
                     "--out", str(out)]) == 0
        result = json.loads((out / "results.json").read_text())
        assert set(result["baselines"]) == {"persistence", "linear extrapolation"}
        assert result["parameters"] == (3 * 3 * 4 + 4 * 3 + 4 * 3 + 4 if model == "lem" else
                                        4 * (3 * 3 + 2 * 3 + 2 * 3) + 4)  # input 1 (+ the gap as dt) / 2 features
