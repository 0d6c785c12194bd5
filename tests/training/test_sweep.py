"""`odelab sweep`: one model keyword or task option varied over values and seeds; each run an `odelab fit` run
(reused when finished), the table and figure read from the runs' results."""
import json
import statistics

import pytest

from odelab.cli import main
from odelab.training import FitError
from odelab.training.sweep import parse_vary

from helpers import random_task_data


@pytest.fixture
def tiny_fhn(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    return random_task_data(monkeypatch, "fhn", 10, (6, 3, 3), 0)


def test_sweep_trains_each_value_and_seed_and_reuses_them(tiny_fhn, tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "fhn", "--model", "lem", "--vary", "dt=0.5,2", "--model-option", "official_bias=True",
            "--seeds", "2", "--epochs", "1", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    result = json.loads((out / "sweep-fhn-lem-dt.json").read_text())
    assert result["key"] == "dt" and result["kind"] == "model" and [r["value"] for r in result["rows"]] == [0.5, 2]
    for row in result["rows"]:
        assert row["seeds"] == [1234, 1235]
        runs = [json.loads((out / f"fhn-lem-dt={row['value']},official_bias=True-quick-seed{s}" / "results.json")
                           .read_text()) for s in row["seeds"]]
        assert all(r["model_options"] == {"dt": row["value"], "official_bias": True} for r in runs)
        assert row["values"] == [r["test_rmse"] for r in runs]
        assert row["mean"] == pytest.approx(statistics.mean(row["values"]))
        assert row["std"] == pytest.approx(statistics.stdev(row["values"]))
    assert result["rows"][0]["values"] != result["rows"][1]["values"]  # dt changed the model
    assert (out / "sweep-fhn-lem-dt.png").stat().st_size > 0
    stamp = (out / "fhn-lem-dt=0.5,official_bias=True-quick-seed1234" / "results.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(argv) == 0  # the finished runs are reused
    assert "odelab fit" not in capsys.readouterr().out
    assert (out / "fhn-lem-dt=0.5,official_bias=True-quick-seed1234" / "results.json").stat().st_mtime_ns == stamp


def test_vary_reads_model_keywords_and_task_options():
    assert parse_vary("fhn", "lem", "dt=0.1, 1") == ("dt", "model", [0.1, 1])
    assert parse_vary("fhn", "lem", "min_gate=0.5") == ("min_gate", "model", [0.5])
    assert parse_vary("adding", "lem", "length=250,500") == ("length", "task", [250, 500])  # the loader's int
    assert parse_vary("frequency", "taugru", "noise=0,0.1") == ("noise", "task", [0.0, 0.1])
    with pytest.raises(FitError, match="neither a keyword of lem .*dt.* nor an option of the task adding .*length"):
        parse_vary("adding", "lem", "gamma=1")
    with pytest.raises(FitError, match="expected KEY=V1,V2"):
        parse_vary("fhn", "lem", "dt")


def test_cli_sweep_errors(tiny_fhn, tmp_path, capsys):
    assert main(["sweep", "fhn", "--vary", "nope=1", "--out", str(tmp_path)]) == 2
    assert "--vary: 'nope' is neither" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "fhn", "--model", "nope", "--vary", "dt=1"])
