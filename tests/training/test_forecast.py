"""`odelab forecast`: the rows after a CSV series' end from an `odelab fit csv` run -- the model reads the file's last
rows normalised with the training rows' mean and std (written here with numpy from the file itself), its last
output is the next H rows in the file's units, increments summed onto the last level for a differenced run."""
import csv
import json
from datetime import datetime, timedelta

import numpy as np
import pytest
import torch

from odelab.cli import main
from odelab.training import load_run
from odelab.training.forecast import forecast

from helpers import random_task_data


def write_series(path, rows=240, extra=0):
    t = np.arange(rows + extra)
    load, temp = 10 + 3 * np.sin(t / 4) + 0.02 * t, 20 + np.cos(t / 9)
    with open(path, "w") as f:
        f.write("step,load,temp\n" + "".join(f"{i},{a:.6f},{b:.6f}\n" for i, a, b in zip(t, load, temp)))
    return np.stack([np.round(load, 6), np.round(temp, 6)], 1)


def fit(tmp_path, path, *options):
    run = tmp_path / ("run" + "".join(options).replace("-", ""))
    assert main(["fit", "csv", "--csv", str(path), "--columns", "load,temp", "--epochs", "1", "--hidden", "4",
                 "--no-progress", "--out", str(run), *options]) == 0
    return run


def reference(run, levels, difference, context, horizon, trained_on=None):
    """The model on the last ``context`` rows normalised by the statistics of the training rows (the first 70 %)
    of the file the run trained on (``trained_on``, default ``levels``)."""
    model, _ = load_run(run)
    series = np.diff(levels, axis=0) if difference else levels
    trained = levels if trained_on is None else trained_on
    trained = np.diff(trained, axis=0) if difference else trained
    train = trained[:int(np.floor(0.7 * len(trained)))]
    mean, std = train.mean(0), train.std(0)
    x = torch.tensor((series[-context:] - mean) / std, dtype=torch.float32)[None]
    with torch.no_grad():
        out = model(x)[0, -1].double().numpy().reshape(horizon, 2) * std + mean
    return levels[-1] + out.cumsum(0) if difference else out


@pytest.mark.parametrize("difference", [False, True])
def test_the_forecast_is_the_models_last_output_in_the_files_units(tmp_path, difference):
    path = tmp_path / "series.csv"
    levels = write_series(path)
    run = fit(tmp_path, path, "--horizon", "3", *(["--difference"] if difference else []))
    result = forecast(run)
    test_rows = len(levels) - (1 if difference else 0) - int(np.floor(0.7 * (len(levels) - difference))) \
        - int(np.floor(0.15 * (len(levels) - difference)))
    assert result["context"] == test_rows and result["columns"] == ["load", "temp"] and result["horizon"] == 3
    assert np.allclose(result["rows"], reference(run, levels, difference, test_rows, 3), rtol=1e-6, atol=1e-6)
    assert result["last"] == pytest.approx(levels[-1].tolist())
    short = forecast(run, context=5)  # the model reads only the last five
    assert np.allclose(short["rows"], reference(run, levels, difference, 5, 3), rtol=1e-6, atol=1e-6)


def test_a_newer_file_is_forecast_from_its_own_end(tmp_path):
    path = tmp_path / "series.csv"
    first = write_series(path)
    run = fit(tmp_path, path, "--horizon", "2")
    newer = tmp_path / "newer.csv"
    levels = write_series(newer, extra=30)
    result = forecast(run, newer, context=40)  # normalised as the model was trained: the first file's statistics
    assert result["rows_read"] == 270 and result["last"] == pytest.approx(levels[-1].tolist())
    assert np.allclose(result["rows"], reference(run, levels, False, 40, 2, first), rtol=1e-6, atol=1e-6)
    other = tmp_path / "other.csv"
    other.write_text("step,load\n" + "".join(f"{i},{i * 0.5}\n" for i in range(50)))
    with pytest.raises(ValueError, match=r"columns: unknown column\(s\) \['temp'\]"):
        forecast(run, other)


def test_the_command_writes_the_forecast_and_refuses_other_runs(tmp_path, capsys, monkeypatch):
    path = tmp_path / "series.csv"
    write_series(path)
    run = fit(tmp_path, path, "--horizon", "4")
    capsys.readouterr()
    out = tmp_path / "ahead"
    assert main(["forecast", "--run", str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    with open(out / "forecast.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["rows_ahead", "load", "temp"] and [r[0] for r in rows[1:]] == ["1", "2", "3", "4"]
    saved = json.loads((out / "forecast.json").read_text())
    assert np.allclose([[float(v) for v in r[1:]] for r in rows[1:]], saved["rows"], rtol=1e-9)
    assert (out / "forecast_ahead.png").stat().st_size > 0 and "rows ahead" in printed
    random_task_data(monkeypatch, "fhn", 10, (6, 3, 3), 0)
    assert main(["fit", "fhn", "--epochs", "1", "--hidden", "3", "--no-progress", "--out", str(tmp_path / "fhn")]) == 0
    with pytest.raises(SystemExit, match="a run of the task 'fhn'; forecast reads runs of `odelab fit csv`"):
        main(["forecast", "--run", str(tmp_path / "fhn")])
    with pytest.raises(SystemExit):
        main(["forecast", "--run", str(run), "--context", "0"])
    assert "argument --context: expected an integer >= 1, got '0'" in capsys.readouterr().err


def test_a_run_with_a_time_column_steps_by_the_gaps_and_forecasts_one_median_gap_ahead(tmp_path):
    rng = np.random.default_rng(5)
    t = np.cumsum(rng.uniform(0.2, 1.8, 240)).round(3)
    levels = np.stack([np.round(np.sin(t / 3), 6), np.round(np.cos(t / 5), 6)], 1)
    path = tmp_path / "irregular.csv"
    path.write_text("t,load,temp\n" + "".join(f"{w},{a:.6f},{b:.6f}\n" for w, (a, b) in zip(t, levels)))
    run = fit(tmp_path, path, "--time", "t")
    model, info = load_run(run)
    assert model.gaps_as_step and info["architecture"]["time_gaps"]  # LEM steps by each row's gap
    result = forecast(run, context=30)
    gaps = np.diff(t)
    train = levels[:int(np.floor(0.7 * len(levels)))]
    median = np.median(gaps[:len(train)])  # the training rows' gaps (and the one to the next row): the unit
    x = (levels[-30:] - train.mean(0)) / train.std(0)
    step = np.append(gaps, median)[-30:] / median  # the last row's next time: one median gap on
    with torch.no_grad():
        out = model(torch.tensor(np.concatenate((x, step[:, None]), 1), dtype=torch.float32)[None])[0, -1]
    assert np.allclose(result["rows"], out.double().numpy()[None] * train.std(0) + train.mean(0), rtol=1e-6,
                       atol=1e-6)
    assert result["times"] == pytest.approx([t[-1] + median])
    dated = tmp_path / "dated.csv"  # the same rows at dates: the times ahead are dates too
    dated.write_text("t,load,temp\n" + "".join(f"2024-01-01T00:00:00,{a:.6f},{b:.6f}\n".replace(
        "2024-01-01T00:00:00", (np.datetime64("2024-01-01T00:00:00") + np.timedelta64(int(round(w * 3600)), "s"))
        .astype(str)) for w, (a, b) in zip(t, levels)))
    run = fit(tmp_path, dated, "--time", "t", "--horizon", "2")
    ahead = forecast(run)["times"]
    last = datetime(2024, 1, 1) + timedelta(seconds=int(round(t[-1] * 3600)))
    step = float(np.median(np.diff(np.round(t * 3600))[:len(train)]))
    assert ahead == [(last + timedelta(seconds=h * step)).isoformat() for h in (1, 2)]


def test_a_run_given_a_relative_path_forecasts_from_another_folder(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    levels = write_series(data / "series.csv")
    monkeypatch.chdir(data)
    run = fit(tmp_path, "series.csv")
    monkeypatch.chdir(tmp_path)  # series.csv is not here: the file the run read, by its absolute path
    result = forecast(run)
    assert result["file"] == str(data / "series.csv") and result["last"] == pytest.approx(levels[-1].tolist())


def test_missing_cells_of_a_newer_file(tmp_path, capsys):
    """A newer file with empty cells: refused by default (the run read a complete file), with a hint that names
    --missing; with --missing previous the forecast is that of the file with the cells copied from above by hand."""
    path = tmp_path / "series.csv"
    first = write_series(path)
    run = fit(tmp_path, path, "--horizon", "2")
    newer = tmp_path / "newer.csv"
    levels = write_series(newer, extra=10)
    lines = newer.read_text().splitlines()
    for row in (245, 248):  # the load cell of data rows 245 and 248 (line row + 1)
        step, _, temp = lines[row + 1].split(",")
        lines[row + 1] = f"{step},,{temp}"
        levels[row, 0] = levels[row - 1, 0]
    newer.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="column 'load' has a missing .*--missing previous\\|linear"):
        forecast(run, newer)
    result = forecast(run, newer, context=30, missing="previous")
    assert result["filled"] == {"load": 2}
    assert np.allclose(result["rows"], reference(run, levels, False, 30, 2, first), rtol=1e-6, atol=1e-6)
    capsys.readouterr()
    assert main(["forecast", "--run", str(run), "--csv", str(newer), "--missing", "linear",
                 "--out", str(tmp_path / "ahead")]) == 0
    assert "column 'load': 2 missing values filled" in capsys.readouterr().out
