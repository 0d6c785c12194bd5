"""Early stopping (``TrainConfig.patience``, ``odelab fit --patience``): the run ends once that many epochs in a row
gave no better validation score, keeps its best epoch, and a resumed run ends where the uninterrupted one did."""
import pytest
import torch

import odelab
from odelab.cli import main
from odelab.training import TrainConfig, fit

from helpers import random_task_data


def noise(seed=0):
    """Targets of pure noise: the validation score soon stops improving."""
    g = torch.Generator().manual_seed(seed)
    return {split: (torch.randn(n, 12, 1, generator=g), torch.randn(n, 12, 1, generator=g))
            for split, n in (("train", 16), ("valid", 8), ("test", 8))}


def model():
    torch.manual_seed(0)
    return odelab.SequenceRegressor(odelab.cells.LEM(1, 4), 4, 1)


def test_the_run_ends_patience_epochs_after_its_best():
    result = fit(model(), noise(), TrainConfig(epochs=40, lr=0.05, batch_size=4, patience=3), progress=False)
    stopped, best, valid = result["stopped_early"], result["best_epoch"], result["history"]["valid_rmse"]
    assert stopped is not None and stopped < 40
    assert stopped - best == 3 and len(valid) == stopped
    assert min(valid) == valid[best - 1] == result["valid_rmse"] and all(v >= valid[best - 1] for v in valid[best:])
    full = fit(model(), noise(), TrainConfig(epochs=stopped, lr=0.05, batch_size=4), progress=False)
    assert full["stopped_early"] is None and full["history"]["valid_rmse"] == valid  # the same epochs, no stop
    assert full["test_rmse"] == result["test_rmse"]


def test_a_resumed_run_stops_where_the_uninterrupted_one_did(tmp_path):
    config = TrainConfig(epochs=40, lr=0.05, batch_size=4, patience=3)
    first = fit(model(), noise(), config, out_dir=tmp_path, progress=False)
    again = fit(model(), noise(), TrainConfig(epochs=60, lr=0.05, batch_size=4, patience=3), out_dir=tmp_path,
                resume=True, progress=False)  # nothing better came within the patience: it ends at once
    assert again["stopped_early"] == first["stopped_early"] and again["history"] == first["history"]
    assert again["test_rmse"] == first["test_rmse"]
    longer = fit(model(), noise(), TrainConfig(epochs=60, lr=0.05, batch_size=4, patience=8), out_dir=tmp_path,
                 resume=True, progress=False)  # a larger patience is not another run: it continues
    fresh = fit(model(), noise(), TrainConfig(epochs=60, lr=0.05, batch_size=4, patience=8), progress=False)
    assert longer["history"]["valid_rmse"] == fresh["history"]["valid_rmse"]
    assert longer["stopped_early"] == fresh["stopped_early"] and longer["test_rmse"] == fresh["test_rmse"]


def test_patience_is_checked_and_reported(monkeypatch, tmp_path, capsys):
    with pytest.raises(ValueError, match="patience: expected a number of epochs >= 1, got 0"):
        TrainConfig(patience=0).check()
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    random_task_data(monkeypatch, "fhn", 12, (16, 8, 8), 0)
    out = tmp_path / "run"
    assert main(["fit", "fhn", "--hidden", "4", "--epochs", "40", "--lr", "0.05", "--batch-size", "4",
                 "--patience", "2", "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "stopped early after epoch" in printed and "2 epochs without a better validation score" in printed
    with pytest.raises(SystemExit):
        main(["fit", "fhn", "--patience", "0"])
    assert "argument --patience: expected an integer >= 1" in capsys.readouterr().err
