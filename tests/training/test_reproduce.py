"""`odelab reproduce`: runs each model once (reusing finished runs) and tabulates ours beside the paper's."""
import json

import pytest

import odelab.data.tasks
from odelab.cli import main
from odelab.data import fitzhugh_nagumo


def test_reproduce_runs_models_reuses_finished_runs_and_writes_the_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    tiny = fitzhugh_nagumo(seed=1234, sizes=(("train", 4), ("valid", 3), ("test", 3)))
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, **options: tiny)
    argv = ["reproduce", "fhn", "--models", "lem,lstm", "--epochs", "1", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    table = json.loads((tmp_path / "fhn.json").read_text())
    rows = {r["model"]: r for r in table["rows"]}
    assert set(rows) == {"lem", "lstm"}
    assert rows["lem"]["paper"] == 0.2 and rows["lstm"]["paper"] == 1.2
    run = json.loads((tmp_path / "fhn-lem" / "results.json").read_text())
    assert rows["lem"]["ours"] == pytest.approx(run["test_rmse"] * 100)
    stamp = (tmp_path / "fhn-lem" / "results.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(argv) == 0  # second call reuses the finished runs
    assert (tmp_path / "fhn-lem" / "results.json").stat().st_mtime_ns == stamp
    assert "odelab fit" not in capsys.readouterr().out
    # a longer reproduction extends the finished runs from their checkpoints
    assert main(argv[:-5] + ["--epochs", "2", "--out", str(tmp_path), "--no-progress"]) == 0
    extended = json.loads((tmp_path / "fhn-lem" / "results.json").read_text())
    assert extended["config"]["epochs"] == 2 and extended["history"]["epoch"] == [1, 2]
    assert extended["history"]["valid_rmse"][0] == run["history"]["valid_rmse"][0]
    table = json.loads((tmp_path / "fhn.json").read_text())["rows"]  # the 1-epoch rows are kept beside the 2-epoch ones
    assert sorted((r["model"], r["epochs"]) for r in table) == [("lem", 1), ("lem", 2), ("lstm", 1), ("lstm", 2)]
