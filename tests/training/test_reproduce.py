"""`odelab reproduce`: runs each model once (reusing finished runs) and tabulates ours beside the paper's."""
import json

import pytest
from helpers import fresh_cache

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


def test_seeds_give_one_row_with_every_seed_and_the_sample_std(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    tiny = fitzhugh_nagumo(seed=1234, sizes=(("train", 4), ("valid", 3), ("test", 3)))
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, **options: tiny)
    argv = ["reproduce", "fhn", "--models", "lem", "--epochs", "1", "--seeds", "3", "--seed", "7",
            "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    (row,) = json.loads((tmp_path / "fhn.json").read_text())["rows"]
    assert row["seeds"] == [7, 8, 9] and row["epochs"] == 1 and row["paper_epochs"] == 400
    runs = [json.loads((tmp_path / f"fhn-lem-seed{s}" / "results.json").read_text()) for s in (7, 8, 9)]
    values = [r["test_rmse"] * 100 for r in runs]
    assert row["values"] == pytest.approx(values)
    assert len(set(values)) == 3  # the seeds differ (initialisation)
    mean = sum(values) / 3
    assert row["ours"] == pytest.approx(mean)
    assert row["std"] == pytest.approx((sum((v - mean) ** 2 for v in values) / 2) ** 0.5)
    assert row["baselines"]["linear extrapolation"] == pytest.approx(runs[0]["baselines"]["linear extrapolation"] * 100)


def test_task_options_reach_the_loader_and_name_the_folder_and_the_column(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    tiny = fitzhugh_nagumo(seed=1234, sizes=(("train", 4), ("valid", 3), ("test", 3)))
    seen = []

    def load(seed, solver="odelab"):
        seen.append(solver)
        return tiny

    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", load)
    argv = ["reproduce", "fhn", "--models", "lstm", "--epochs", "1", "--option", "solver=paper-exact",
            "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    assert "paper-exact" in seen
    (row,) = json.loads((tmp_path / "fhn.json").read_text())["rows"]
    assert row["options"] == {"solver": "paper-exact"}
    assert (tmp_path / "fhn-solver=paper-exact-lstm" / "results.json").exists()
    assert main(argv[:-5] + ["--option", "colour=red", "--out", str(tmp_path)]) == 2  # not an option of the task


def test_a_data_option_error_stops_reproduce_at_once(tmp_path, capsys):
    argv = ["reproduce", "duffing", "--option", "valid_window=250", "--seeds", "3", "--epochs", "1",
            "--out", str(tmp_path), "--no-progress"]  # valid_window needs reading=official: every run would fail
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "only under reading=official" in captured.err and "failed" not in captured.out
    assert not list(tmp_path.glob("duffing-*"))  # no run folder left behind, no other model or seed tried


def test_report_tables_every_task_marks_the_best_and_shortened_rows_and_fills_the_readme(tmp_path):
    from odelab.training import report

    rows = [{"model": m, "preset": "paper", "options": {}, "epochs": 60, "paper_epochs": 400, "seeds": [1, 2, 3],
             "values": [v, v, v], "ours": v, "std": 0.0, "paper": p, "paper_std": None, "device": "cpu",
             "parameters": 100, "baselines": {"persistence": 0.079}}
            for m, v, p in (("taugru", 0.01, 0.17), ("lem", 0.005, 0.31), ("lstm", 0.03, 0.92))]
    rows[0]["values"] = [0.012, 0.008, 0.01]  # the best seed of an error: the lowest
    (tmp_path / "enso.json").write_text(json.dumps({"task": "enso", "rows": rows}))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{report.BEGIN}\nold table 1.23\n{report.END}\nafter\n")
    text = report.report(tmp_path, tmp_path / "fig", readme)
    assert "**0.005 ± 0** (best)" in text  # LEM has the lowest MSE
    assert "SHORTENED: 60 of 400 epochs" in text
    assert report.protocol({**rows[0], "preset": "small", "epochs": 20, "paper_epochs": 20}).startswith("SHORTENED")
    assert report.protocol({**rows[0], "preset": "paper", "epochs": 100, "paper_epochs": 25}) == (
        "paper, extended: 100 epochs (the preset: 25)")
    assert "the paper's winner is τ-GRU; here LEM wins" in text
    assert "| baseline: persistence | 0.079 |" in text
    assert "| τ-GRU | 0.01 ± 0 | 0.008 | 3 |" in text
    assert (tmp_path / "fig" / "enso.png").stat().st_size > 1000
    content = readme.read_text()
    assert content.startswith("intro\n") and content.endswith("after\n") and "old table" not in content
    assert "](fig/enso.png)" in content and (tmp_path / "REPORT.md").exists()


def test_a_shorter_protocol_never_reuses_a_longer_run_of_the_same_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    tiny = fitzhugh_nagumo(seed=1234, sizes=(("train", 4), ("valid", 3), ("test", 3)))
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, **options: tiny)
    argv = ["reproduce", "fhn", "--models", "lem", "--out", str(tmp_path), "--no-progress", "--epochs"]
    assert main(argv + ["2"]) == 0
    stamp = (tmp_path / "fhn-lem" / "results.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(argv + ["1"]) == 0
    assert "holds a run of 2 epochs, more than 1" in capsys.readouterr().out
    assert (tmp_path / "fhn-lem" / "results.json").stat().st_mtime_ns == stamp  # the 2-epoch run is untouched
    rows = json.loads((tmp_path / "fhn.json").read_text())["rows"]
    assert [r["epochs"] for r in rows] == [2]  # no 1-epoch row was made from it


def test_a_reading_with_its_own_metric_reads_its_own_result_and_names_it_in_the_report(tmp_path):
    from odelab.training import report
    from odelab.training.reproduce import TABLES

    table = TABLES["duffing"]
    result = {"test_rmse": 0.2, "test_mae": 0.05}
    assert table.value(result) == pytest.approx(0.04)  # the default reading: MSE = RMSE²
    assert table.value(result, "reading=official") == pytest.approx(0.05)  # the paper's reading: L1
    assert table.baseline(0.5, "reading=official") == 0.5 and table.baseline(0.5) == pytest.approx(0.25)
    assert table.paper["reading=official"]["lrc-ode-a"] == (0.003, 0.001)
    # a selection-only option keeps the reading's paper values and metric; another reading has neither
    assert table.paper_for("reading=official,valid_window=250") == table.paper["reading=official"]
    assert table.value(result, "reading=official,valid_window=250") == pytest.approx(0.05)
    assert table.paper_for("reading=other") == {} and TABLES["enso"].paper_for("horizon=20,stride=2") == {}
    rows = [{"model": m, "preset": "paper", "options": {"reading": "official"}, "epochs": 32, "paper_epochs": 32,
             "seeds": [1, 2, 3], "values": [v] * 3, "ours": v, "std": 0.0, "paper": p, "paper_std": None,
             "device": "cpu", "parameters": 100, "baselines": {}} for m, v, p in (("lrc-ode-a", 0.002, 0.003),
                                                                                   ("node", 0.01, 0.142))]
    rows += [dict(r, options={"reading": "official", "valid_window": 250}) for r in rows]
    (tmp_path / "duffing.json").write_text(json.dumps({"task": "duffing", "rows": rows}))
    text = report.report(tmp_path)
    assert "**task option reading=official (test MAE, the paper's reading); paper**" in text
    assert "**task option reading=official,valid_window=250 (test MAE, the paper's reading); paper**" in text
    assert "the paper's winner, LRC neural ODE (A), wins here too" in text


def test_jobs_train_the_runs_in_parallel_processes_with_the_results_of_one_after_another(tmp_path, monkeypatch,
                                                                                           capfd):
    """``--jobs 2``: the four (model, seed) runs in two spawned processes (each loads its data itself, one torch
    thread) give the table and every run's values of the runs one after another, bit for bit; what a worker prints
    goes to its run's output.log, not the terminal, where only the finished runs are announced."""
    monkeypatch.setenv("ODELAB_CACHE", fresh_cache(tmp_path / "cache"))  # the workers load the built kernels
    common = ["reproduce", "adding", "--option", "length=12", "--preset", "quick", "--epochs", "1", "--models",
              "lem,lstm", "--seeds", "2", "--threads", "1", "--no-progress"]
    assert main(common + ["--out", str(tmp_path / "serial")]) == 0
    assert "best epoch" in capfd.readouterr().out  # one after another, each run prints its table
    assert main(common + ["--out", str(tmp_path / "parallel"), "--jobs", "2"]) == 0
    terminal = capfd.readouterr()
    assert "best epoch" not in terminal.out + terminal.err and terminal.out.count(") finished (") == 4
    runs = sorted((tmp_path / "parallel").glob("adding-*"))
    assert len(runs) == 4 and all("best epoch" in (run / "output.log").read_text() for run in runs)
    tables = [json.loads((tmp_path / where / "adding.json").read_text())["rows"] for where in ("serial", "parallel")]
    assert [(r["model"], r["seeds"], r["values"]) for r in tables[0]] == \
        [(r["model"], r["seeds"], r["values"]) for r in tables[1]]
    assert len(tables[1]) == 2 and all(len(r["values"]) == 2 for r in tables[1])
    for run in (tmp_path / "serial").glob("adding-*"):
        a, b = (json.loads((tmp_path / where / run.name / "results.json").read_text()) for where in ("serial", "parallel"))
        assert a["history"]["train_rmse"] == b["history"]["train_rmse"] and a["test_rmse"] == b["test_rmse"]


def test_a_data_option_error_stops_parallel_runs_too(tmp_path, capsys):
    argv = ["reproduce", "duffing", "--option", "valid_window=250", "--seeds", "2", "--epochs", "1", "--jobs", "2",
            "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "only under reading=official" in captured.err and "failed" not in captured.out
    assert not list(tmp_path.glob("duffing-*"))


def test_ctrl_c_in_a_run_stops_reproduce_instead_of_going_on_with_the_next(tmp_path, monkeypatch, capsys):
    import odelab.training.reproduce as reproduce
    from odelab.training.run import FitError

    started = []

    def interrupted(spec):
        started.append(spec.model)
        raise FitError("interrupted after epoch 1; `--resume` continues from checkpoint.pt", code=130)

    monkeypatch.setattr(reproduce, "run_fit", interrupted)
    argv = ["reproduce", "fhn", "--models", "lem,lstm", "--epochs", "1", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 130
    assert started == ["lem"] and "interrupted after epoch 1" in capsys.readouterr().err


def test_run_folders_are_named_by_settings_not_by_data_paths(tmp_path):
    """A data folder's path (smnist's --option path=DIR, csv's file) would nest folders by its slashes."""
    from odelab.training.reproduce import run_folder

    options = {"path": "/data/mnist", "train_size": 100}
    assert run_folder(tmp_path, "smnist", "lem", "paper", 1234, options) == tmp_path / "smnist-train_size=100-lem"
    assert run_folder(tmp_path, "smnist", "lem", "quick", 7, {"path": "a/b"}) == tmp_path / "smnist-lem-quick-seed7"
