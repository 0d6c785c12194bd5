"""FitzHugh--Nagumo task: data against an independent scipy solve, the training loop and the CLI end to end."""
import json

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import odelab.data.tasks
from odelab.cli import main
from odelab.data import fitzhugh_nagumo
from odelab.data.fhn import initial_values

TINY = (("train", 6), ("valid", 4), ("test", 5))


def fhn_rhs(t, x):  # 000 §5.5: v' = v − v³/3 − w + I, w' = τ (v + a − b w)
    v, w = x
    return [v - v**3 / 3 - w + 0.5, 0.02 * (v + 0.7 - 0.8 * w)]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    import os

    os.environ["ODELAB_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return fitzhugh_nagumo(seed=1234, sizes=TINY)


def test_fhn_data_matches_tight_scipy_reference_and_official_seed_stream(tiny_data):
    c = initial_values(1234, TINY)
    rng = np.random.RandomState(1234)  # official order: train, valid, test from one stream, one rand() each
    expected_c = [2.0 * rng.rand() - 1.0 for _ in range(15)]
    assert np.allclose(np.concatenate([c["train"], c["valid"], c["test"]]), expected_c)
    x, y = tiny_data["test"]
    assert x.shape == (5, 1000, 1) and y.shape == (5, 1000, 1)
    assert torch.equal(x[:, 1:], y[:, :-1])  # one-step-ahead: target n is input n+1
    t = np.linspace(0, 400, 1001)
    for k in range(2):
        ref = solve_ivp(fhn_rhs, [0, 400], [c["test"][k], 0.0], t_eval=t, method="DOP853", rtol=1e-11, atol=1e-11).y[0]
        assert np.abs(y[k, :, 0].numpy() - ref[1:]).max() < 1e-4  # float32 storage; scipy defaults would be ~0.4 off


def test_fhn_data_is_cached(tiny_data):
    again = fitzhugh_nagumo(seed=1234, sizes=TINY)
    assert torch.equal(again["train"][0], tiny_data["train"][0])


def test_fit_cli_writes_results_plot_and_resumes_exactly(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, solver="odelab": tiny_data)
    args = ["fit", "fhn", "--model", "lem", "--epochs", "2", "--batch-size", "3", "--no-progress"]
    assert main(args + ["--out", str(tmp_path / "full")]) == 0
    result = json.loads((tmp_path / "full" / "results.json").read_text())
    assert result["test_sequences"] == 5 and len(result["history"]["epoch"]) == 2
    assert np.isfinite(result["test_rmse"]) and result["best_epoch"] >= 1
    for name in ("predictions.png", "curves.png", "curves.csv", "checkpoint.pt"):
        assert (tmp_path / "full" / name).stat().st_size > 0

    # a run stopped after 1 epoch and resumed to 2 ends with exactly the uninterrupted result
    assert main(args[:4] + ["--epochs", "1", "--batch-size", "3", "--no-progress", "--out", str(tmp_path / "cut")]) == 0
    assert main(args + ["--out", str(tmp_path / "cut"), "--resume"]) == 0
    resumed = json.loads((tmp_path / "cut" / "results.json").read_text())
    assert resumed["history"]["valid_rmse"] == result["history"]["valid_rmse"]
    assert resumed["test_rmse"] == result["test_rmse"]


def test_resume_refuses_a_checkpoint_of_other_settings(tiny_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, solver="odelab": tiny_data)
    args = ["fit", "fhn", "--model", "lem", "--epochs", "1", "--batch-size", "3", "--no-progress", "--out", str(tmp_path)]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args + ["--resume", "--lr", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "lr 0.5" in err and "checkpoint: 0.01545" in err


def test_fit_stops_on_nonfinite_loss(tiny_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, solver="odelab": tiny_data)
    code = main(["fit", "fhn", "--model", "lstm", "--epochs", "2", "--lr", "1e30", "--no-progress",
                 "--out", str(tmp_path)])
    assert code == 1
    assert "loss became" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["lstm", "gru"])
def test_baselines_train_through_the_cli(tiny_data, tmp_path, monkeypatch, model):
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, solver="odelab": tiny_data)
    assert main(["fit", "fhn", "--model", model, "--epochs", "1", "--no-progress", "--out", str(tmp_path)]) == 0


def test_persistence_on_the_full_test_set_is_the_theses_figure():
    """Rusch's thesis (ch. 5, FHN): predicting v_{k+1} = v_k gives a test RMSE of 7.85e-2 (std of v ≈ 1.48)."""
    from odelab.data.tasks import TASKS

    data = fitzhugh_nagumo(seed=1234)
    x, y = data["test"]
    assert torch.equal(x[:, 1:], y[:, :-1])  # the input is the previous target
    value = TASKS["fhn"].baselines["persistence"](data)
    assert value == pytest.approx(float(((y[:, 1:] - y[:, :-1]) ** 2).mean().sqrt()), rel=0.01)
    assert value == pytest.approx(7.85e-2, rel=0.01)
