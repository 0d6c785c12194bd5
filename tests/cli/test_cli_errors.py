"""``odelab`` on a user's mistakes (issue 17): every case ends with one line on stderr, an exit code ≠ 0 and no
traceback, and loses no file; resume refuses every changed setting; Ctrl-C keeps the last checkpoint and
``--resume`` then gives the uninterrupted result. Tiny data: the tasks' loaders are replaced (TASKS[...].load)."""
import json
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import fresh_cache

import odelab.data.tasks
import odelab.training.loop
from odelab.cli import main
from odelab.data.cache import cached

QUICK = ["--model", "gru", "--hidden", "3", "--epochs", "1", "--no-progress"]  # nn.GRU: nothing to compile


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", fresh_cache(tmp_path / "cache"))  # the real processes load the built kernels
    return tmp_path / "cache"


def tiny(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {split: (torch.randn(n, 12, 1, generator=g), torch.randn(n, 12, 1, generator=g))
            for split, n in (("train", 6), ("valid", 2), ("test", 2))}


@pytest.fixture
def enso(monkeypatch):
    """The enso task on 6/2/2 random sequences of 12 steps."""
    data = tiny()
    monkeypatch.setattr(odelab.data.tasks.TASKS["enso"], "load", lambda seed, **options: data)
    return data


def write_csv(path, rows=80, trend=0.0, encoding="utf-8"):
    t = np.arange(rows)
    with open(path, "w", encoding=encoding) as f:
        f.write("year,load,temp\n")
        f.writelines(f"{1900 + i},{10 + 3 * np.sin(i / 5) + trend * i:.5f},{20 + np.cos(i / 7):.5f}\n" for i in t)
    return path


def error_line(capsys):
    """The command's stderr: one line, no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:")
             and not line.startswith("       ")]
    assert len(lines) == 1, err
    return lines[0]


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# ---- item 4: numbers, names and choices, before any data is loaded ----------------------------------------------

NUMBER_CASES = [
    (["fit", "enso", "--epochs", "0"], "argument --epochs: expected an integer >= 1, got '0'"),
    (["fit", "enso", "--epochs", "-1"], "argument --epochs: expected an integer >= 1, got '-1'"),
    (["fit", "enso", "--hidden", "0"], "argument --hidden: expected an integer >= 1"),
    (["fit", "enso", "--batch-size", "0"], "argument --batch-size: expected an integer >= 1"),
    (["fit", "enso", "--lr", "0"], "argument --lr: expected a finite number > 0"),
    (["fit", "enso", "--lr", "nan"], "argument --lr: expected a finite number > 0"),
    (["fit", "enso", "--clip", "-1"], "argument --clip: expected a finite number > 0"),
    (["fit", "enso", "--threads", "0"], "argument --threads: expected an integer >= 1"),
    (["fit", "enso", "--seed", "-1"], "argument --seed: expected an integer in [0, 4294967295]"),
    (["fit", "enso", "--epochs", "two"], "argument --epochs: expected an integer, got 'two'"),
    (["fit", "csv", "--csv", "x.csv", "--horizon", "0"], "argument --horizon: expected an integer >= 1"),
    (["fit", "csv", "--csv", "x.csv", "--window", "1"], "argument --window: expected an integer >= 2"),
    (["fit", "adding", "--length", "1"], "argument --length: expected an integer >= 2"),
    (["fit", "csv", "--csv", "x.csv", "--encoding", "klingon"], "argument --encoding: unknown encoding 'klingon'"),
    (["fit", "enso", "--device", "banana"], "argument --device: expected cpu, cuda or cuda:N, got 'banana'"),
    (["fit", "enso", "--model", "foo", "--model-option", "x=1"], "argument --model: invalid choice: 'foo' (choose from"),
    (["fit", "enso", "--preset", "official-cuda"], "--preset: the task enso has the preset(s) paper, quick"),
    (["reproduce", "fhn", "--epochs", "0"], "argument --epochs: expected an integer >= 1"),
    (["reproduce", "fhn", "--threads", "0"], "argument --threads: expected an integer >= 1"),
    (["reproduce", "fhn", "--seed", "-2"], "argument --seed: expected an integer in"),
    (["reproduce", "fhn", "--models", "lem,foo"], "--models: unknown model(s) foo; choose from"),
    (["reproduce", "enso", "--preset", "official-cuda"], "--preset: the task enso has the preset(s)"),
    (["reproduce", "fhn", "--seeds", "0"], "argument --seeds: expected an integer >= 1"),
    (["reproduce"], "give a TASK ("),
    (["reproduce", "fhn", "--report"], "--report collects every table in --out; give no TASK with it"),
    (["compare-schemes", "--task", "nope"], "argument --task: invalid choice: 'nope'"),
    (["compare-schemes", "--model", "foo"], "argument --model: invalid choice: 'foo'"),
    (["compare-schemes", "--hidden", "0"], "argument --hidden: expected an integer >= 1"),
    (["compare-schemes", "--epochs", "0"], "argument --epochs: expected an integer >= 1"),
    (["compare-schemes", "--retrain-epochs", "0"], "argument --retrain-epochs: expected an integer >= 1"),
    (["compare-schemes", "--length", "1"], "argument --length: expected an integer >= 2"),
    (["compare-schemes", "--sequences", "0"], "argument --sequences: expected an integer >= 1"),
    (["compare-schemes", "--finest", "3"], "argument --finest: expected a power of 2"),
    (["compare-schemes", "--seed", "-1"], "argument --seed: expected an integer in"),
    (["stability", "--steps", "1"], "argument --steps: expected an integer >= 2"),
    (["stability", "--hidden", "0"], "argument --hidden: expected an integer >= 1"),
    (["stability", "--seeds", "0"], "argument --seeds: expected an integer >= 1"),
]


@pytest.mark.parametrize("argv, message", NUMBER_CASES, ids=[" ".join(c[0]) for c in NUMBER_CASES])
def test_cli_refuses_bad_arguments_before_loading_data(argv, message, capsys, monkeypatch):
    for task in odelab.data.tasks.TASKS.values():
        monkeypatch.setattr(task, "load", lambda *a, **k: pytest.fail("data loaded before the arguments were checked"))
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert message in error_line(capsys)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_cli_device_cuda_without_cuda_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["fit", "enso", "--device", "cuda"])
    assert exit.value.code == 2
    assert "argument --device: 'cuda' requested but" in error_line(capsys)


@pytest.mark.parametrize("model, option, accepted", [("lem", "foo=1", "dt"),
                                                     ("taugru", "foo=1", "tau, dt, state_dropout, alpha, beta, weighting, gating"),
                                                     ("cornn", "foo=1", "dt, gamma, epsilon, damping")])
def test_cli_unknown_model_option_lists_the_accepted_keys_before_loading(model, option, accepted, tmp_path,
                                                                          monkeypatch, capsys):
    monkeypatch.setattr(odelab.data.tasks.TASKS["enso"], "load", lambda *a, **k: pytest.fail("data loaded"))
    code = None
    try:
        code = main(["fit", "enso", "--model-option", option, "--out", str(tmp_path / "run")] + QUICK[2:]
                    + ["--model", model])
    except SystemExit as exit:
        code = exit.code
    assert code == 2
    line = error_line(capsys)
    assert "--model-option" in line and "'foo'" in line and accepted in line
    assert not (tmp_path / "run").exists()


def test_cli_help_texts_name_every_preset_and_option(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at the terminal's width, and breaks words at hyphens
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "fhn: official-cuda, paper, quick" in text.replace("paper, official-cuda, quick", "official-cuda, paper, quick")
    assert "--epochs EPOCHS training epochs" in text and "--strict" in text and "--difference" in text
    assert "--encoding" in text and "any changed setting" in text
    with pytest.raises(SystemExit):
        main(["compare-schemes", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--task TASK the task whose data" in text and "mackey-glass" in text
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    assert "official-cuda" in capsys.readouterr().out


# ---- item 2: resume checks every setting --------------------------------------------------------------------------

def test_cli_resume_refuses_every_changed_setting_and_keeps_the_run(enso, tmp_path, capsys):
    out = tmp_path / "run"
    base = ["fit", "enso", "--model", "lem", "--out", str(out), "--hidden", "3", "--no-progress"]
    assert main(base + ["--epochs", "1"]) == 0
    before = snapshot(out)
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    assert saved["settings"]["model"] == "lem" and saved["settings"]["hidden_size"] == 3
    recorded = json.loads((out / "results.json").read_text())["settings"]
    assert recorded == saved["settings"] and recorded["preset"] == "quick" and recorded["task"] == "enso"
    capsys.readouterr()
    cases = [(["--model", "gru"], "model 'gru' (checkpoint: 'lem')"),
             (["--hidden", "4"], "hidden_size 4 (checkpoint: 3)"),
             (["--seed", "7"], "seed 7 (checkpoint: 1234)"),
             (["--preset", "paper"], "preset 'paper' (checkpoint: 'quick')"),
             (["--model-option", "dt=0.5"], "model_options {'dt': 0.5} (checkpoint: {})"),
             (["--lr", "0.5"], "lr 0.5 (checkpoint: 0.01)")]
    for extra, message in cases:
        args = [a for a in base if a not in ("--hidden", "3")] + (["--hidden", "3"] if "--hidden" not in extra else [])
        assert main(args + ["--resume", "--epochs", "2"] + extra) == 2, extra
        line = error_line(capsys)
        assert line.startswith(f"odelab: cannot resume from {out / 'checkpoint.pt'}: ") and message in line, line
        assert "use another --out or the same settings" in line
        assert snapshot(out) == before  # nothing lost, nothing changed
    # a finished run is extended by a larger --epochs
    assert main(base + ["--epochs", "2", "--resume"]) == 0
    assert json.loads((out / "results.json").read_text())["history"]["epoch"] == [1, 2]


def test_cli_resume_refuses_another_csv_file_or_horizon_but_not_a_moved_file(tmp_path, capsys):
    first, other = write_csv(tmp_path / "a.csv"), write_csv(tmp_path / "b.csv", trend=0.01)
    out = tmp_path / "run"
    base = ["fit", "csv", "--window", "16", "--out", str(out)] + QUICK
    assert main(base + ["--csv", str(first)]) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert main(base + ["--csv", str(other), "--resume", "--epochs", "2"]) == 2
    line = error_line(capsys)
    assert f"data file {other} (sha256 " in line and f"(checkpoint: {first} (sha256 " in line
    for extra, message in ((["--horizon", "2"], "horizon 2 (checkpoint: 1)"),
                           (["--difference"], "difference True (checkpoint: False)"),
                           (["--columns", "load"], "columns ['load'] (checkpoint: ['load', 'temp'])"),
                           (["--window", "20"], "window 20 (checkpoint: 16)")):
        assert main(base + ["--csv", str(first), "--resume", "--epochs", "2"] + extra) == 2
        assert message in error_line(capsys)
    assert snapshot(out) == before
    moved = tmp_path / "moved.csv"
    moved.write_bytes(first.read_bytes())
    assert main(base + ["--csv", str(moved), "--resume", "--epochs", "2"]) == 0  # the same content


# ---- item 5: clean failures ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "random", "pickle", "empty"])
def test_cli_corrupt_checkpoint_is_one_line_and_kept(damage, enso, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["fit", "enso", "--out", str(out)] + QUICK
    assert main(args) == 0
    checkpoint = out / "checkpoint.pt"
    good = checkpoint.read_bytes()
    bad = {"truncated": good[:len(good) // 2], "random": np.random.default_rng(0).bytes(4000),
           "pickle": pickle.dumps([1, 2, 3]), "empty": b""}[damage]
    checkpoint.write_bytes(bad)
    capsys.readouterr()
    assert main(args + ["--resume"]) == 2
    line = error_line(capsys)
    assert f"cannot resume: {checkpoint} is not a readable checkpoint" in line
    assert "use another --out, or delete it to start over" in line and "weights_only" not in line
    assert checkpoint.read_bytes() == bad  # left for the user to inspect


def test_cli_checkpoint_of_an_older_version_with_another_model_is_one_line(enso, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["fit", "enso", "--out", str(out)] + QUICK) == 0
    saved = torch.load(out / "checkpoint.pt", weights_only=True)
    del saved["settings"]  # as written before the settings were recorded
    torch.save(saved, out / "checkpoint.pt")
    capsys.readouterr()
    assert main(["fit", "enso", "--out", str(out), "--resume", "--model", "gru", "--hidden", "5", "--epochs", "2",
                 "--no-progress"]) == 2
    assert "it holds another model" in error_line(capsys)


def test_cli_corrupt_data_cache_is_named_and_regenerated(tmp_path, capsys):
    built = []

    def build():
        built.append(1)
        return {"x": torch.arange(3)}

    first = cached("toy", {"a": 1}, build, tmp_path)
    path = next(tmp_path.glob("toy-*.pt"))
    path.write_bytes(b"\x00garbage" * 10)
    again = cached("toy", {"a": 1}, build, tmp_path)
    assert torch.equal(again["x"], first["x"]) and len(built) == 2
    err = capsys.readouterr().err
    assert f"the cached data file {path} is unreadable" in err and "generating the data again" in err
    assert torch.load(path, weights_only=True)["x"].tolist() == [0, 1, 2]  # a good file again


def test_cli_csv_errors_are_one_line(tmp_path, capsys):
    latin = write_csv(tmp_path / "latin.csv", encoding="latin-1")
    latin.write_bytes(latin.read_bytes().replace(b"temp", "température".encode("latin-1")))
    out = tmp_path / "run"
    assert main(["fit", "csv", "--csv", str(latin), "--out", str(out)] + QUICK) == 2
    line = error_line(capsys)
    assert f"{str(latin)!r} is not utf-8 text" in line and "--encoding latin-1" in line
    assert main(["fit", "csv", "--csv", str(latin), "--encoding", "latin-1", "--window", "16", "--out", str(out)]
                + QUICK) == 0
    assert json.loads((out / "results.json").read_text())["data"]["columns"] == ["load", "température"]
    capsys.readouterr()

    hole = write_csv(tmp_path / "hole.csv")
    text = hole.read_text().splitlines()
    text[9] = "1908,,20.5"
    hole.write_text("\n".join(text) + "\n")
    assert main(["fit", "csv", "--csv", str(hole), "--strict", "--out", str(tmp_path / "x")] + QUICK) == 2
    assert "--strict: column 'load' has a bad cell: line 10: '' is a missing value" in error_line(capsys)
    assert main(["fit", "csv", "--csv", str(hole), "--columns", "load", "--out", str(tmp_path / "x")] + QUICK) == 2
    assert "column 'load' has a missing or non-numeric value: line 10" in error_line(capsys)
    # without --strict the column is left out, and said so
    assert main(["fit", "csv", "--csv", str(hole), "--window", "16", "--out", str(tmp_path / "y")] + QUICK) == 0
    said = capsys.readouterr().out
    assert "columns modelled: temp" in said and "'load' (a bad cell: line 10: '' is a missing value)" in said
    assert "'year' (strictly increasing with a constant step 1" in said
    assert json.loads((tmp_path / "y" / "results.json").read_text())["data"]["excluded"]["load"].startswith("a bad")

    folder_as_file = tmp_path / "file"
    folder_as_file.write_text("keep me")
    assert main(["fit", "csv", "--csv", str(hole), "--out", str(folder_as_file / "run")] + QUICK) == 2
    assert "--out: cannot create the folder" in error_line(capsys) and folder_as_file.read_text() == "keep me"


def test_cli_csv_shift_warning_and_difference(tmp_path, capsys):
    path = write_csv(tmp_path / "co2.csv", rows=100, trend=0.3)
    out = tmp_path / "run"
    assert main(["fit", "csv", "--csv", str(path), "--columns", "load", "--window", "16", "--out", str(out)]
                + QUICK) == 0
    captured = capsys.readouterr()
    assert "odelab: warning: distribution shift: the test part of 'load'" in captured.err
    assert "--difference" in captured.err
    assert json.loads((out / "results.json").read_text())["data"]["warnings"]
    assert main(["fit", "csv", "--csv", str(path), "--columns", "load", "--window", "16", "--difference",
                 "--out", str(tmp_path / "diff")] + QUICK) == 0
    assert "distribution shift" not in capsys.readouterr().err
    result = json.loads((tmp_path / "diff" / "results.json").read_text())
    assert result["data"]["difference"] and result["settings"]["difference"] is True
    assert set(result["test_rmse_by_column"]["load"]) == {"model", "persistence"}
    assert (tmp_path / "diff" / "forecast.png").stat().st_size > 0


def test_cli_compare_schemes_bad_checkpoint_and_csv_task(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit) as exit:
        main(["compare-schemes", "--checkpoint", str(bad)])
    assert f"{bad} is not a readable checkpoint" in str(exit.value.code) and "weights_only" not in str(exit.value.code)
    with pytest.raises(SystemExit) as exit:
        main(["compare-schemes", "--run", str(tmp_path)])
    assert "results.json is missing" in str(exit.value.code)
    with pytest.raises(SystemExit) as exit:
        main(["compare-schemes", "--task", "csv"])
    assert "not csv" in str(exit.value.code)
    assert bad.read_bytes() == b"not a checkpoint"


# ---- Ctrl-C --------------------------------------------------------------------------------------------------------

def test_cli_ctrl_c_keeps_the_last_checkpoint_and_resume_is_exact(enso, tmp_path, monkeypatch, capsys):
    args = ["fit", "enso", "--model", "lem", "--hidden", "3", "--batch-size", "2", "--no-progress"]
    assert main(args + ["--epochs", "3", "--out", str(tmp_path / "full")]) == 0
    full = json.loads((tmp_path / "full" / "results.json").read_text())

    calls, rmse = [], odelab.training.loop.rmse

    def interrupt_in_epoch_2(*a, **k):
        calls.append(1)
        if len(calls) == 3:  # train RMSE of epoch 2
            raise KeyboardInterrupt
        return rmse(*a, **k)

    monkeypatch.setattr(odelab.training.loop, "rmse", interrupt_in_epoch_2)
    cut = tmp_path / "cut"
    capsys.readouterr()
    assert main(args + ["--epochs", "3", "--out", str(cut)]) == 130
    checkpoint = cut / "checkpoint.pt"
    assert error_line(capsys) == f"odelab: interrupted after epoch 1; `--resume` continues from {checkpoint}"
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 0  # epoch 1, intact
    assert sorted(p.name for p in cut.iterdir()) == ["checkpoint.pt"]  # no half-written file
    monkeypatch.setattr(odelab.training.loop, "rmse", rmse)
    assert main(args + ["--epochs", "3", "--out", str(cut), "--resume"]) == 0
    resumed = json.loads((cut / "results.json").read_text())
    assert resumed["history"]["valid_rmse"] == full["history"]["valid_rmse"]
    assert resumed["test_rmse"] == full["test_rmse"]


def test_cli_ctrl_c_before_training_is_one_line(tmp_path, monkeypatch, capsys):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(odelab.data.tasks.TASKS["enso"], "load", interrupted)
    assert main(["fit", "enso", "--out", str(tmp_path / "run")] + QUICK) == 130
    assert error_line(capsys) == "odelab fit: interrupted"


def test_cli_sigint_in_a_real_process_exits_130_with_the_checkpoint(tmp_path):
    path = write_csv(tmp_path / "s.csv", rows=400)
    out = tmp_path / "run"
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from odelab.cli import main; sys.exit(main(sys.argv[1:]))")
    process = subprocess.Popen([sys.executable, "-c", code, "fit", "csv", "--csv", str(path), "--window", "16",
                                "--model", "gru", "--hidden", "3", "--epochs", "100000", "--threads", "1",
                                "--no-progress",
                                "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "checkpoint.pt").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("odelab: interrupted after epoch ") and "`--resume` continues from" in line
    epochs = int(line.split("after epoch ")[1].split(";")[0])
    assert torch.load(out / "checkpoint.pt", weights_only=True)["epoch"] + 1 == epochs


def test_cli_resume_after_kill_9_is_exactly_the_uninterrupted_run(tmp_path):
    path = write_csv(tmp_path / "s.csv", rows=200)
    args = ["fit", "csv", "--csv", str(path), "--window", "16", "--model", "gru", "--hidden", "3", "--epochs", "10",
            "--threads", "1", "--no-progress"]
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "odelab"] + args + ["--out", str(killed)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "checkpoint.pt").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    process.kill()  # SIGKILL: no handler runs; the checkpoint on disk is whole (written atomically)
    process.wait(timeout=60)
    threads = torch.get_num_threads()
    try:
        assert main(args + ["--out", str(killed), "--resume"]) == 0
        assert main(args + ["--out", str(tmp_path / "full")]) == 0
    finally:
        torch.set_num_threads(threads)
    resumed, full = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("killed", "full"))
    assert resumed["history"]["valid_rmse"] == full["history"]["valid_rmse"]
    assert resumed["test_rmse"] == full["test_rmse"]


def test_engine_option_reaches_the_run_and_the_fused_kernel_trains_as_the_definition(tmp_path, monkeypatch, capsys):
    """--engine generic and the default (the fused CPU kernel) train to the same test RMSE."""
    import json

    import odelab.data.tasks
    from odelab.data import fitzhugh_nagumo
    from odelab.cli import main

    full = fitzhugh_nagumo(sizes=(("train", 8), ("valid", 4), ("test", 4)), cache=False)
    data = {k: (x[:, :30].contiguous(), y[:, :30].contiguous()) for k, (x, y) in full.items()}
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, **options: data)
    rmse = {}
    for engine in ("auto", "generic"):
        out = tmp_path / engine
        assert main(["fit", "fhn", "--model", "lem", "--hidden", "4", "--epochs", "2", "--no-progress",
                     "--engine", engine, "--out", str(out)]) == 0
        result = json.loads((out / "results.json").read_text())
        assert result["engine"] == engine
        rmse[engine] = result["test_rmse"]
    assert abs(rmse["auto"] - rmse["generic"]) <= 1e-5 * rmse["generic"]


def test_an_engine_that_cannot_run_is_refused_before_training(tmp_path, monkeypatch, capsys):
    """--engine cuda-graph on the CPU used to fail with a traceback at the first batch; --engine fused on a model
    without an odelab cell (LSTM, the neural ODE) was silently ignored."""
    from helpers import random_task_data
    from odelab.cli import main

    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    random_task_data(monkeypatch, "fhn", 10, (4, 2, 2), 0)
    common = ["fit", "fhn", "--hidden", "3", "--epochs", "1", "--no-progress"]
    assert main(common + ["--model", "lem", "--engine", "cuda-graph", "--out", str(tmp_path / "a")]) == 2
    assert "--engine cuda-graph records CUDA graphs: it needs --device cuda, not cpu" in capsys.readouterr().err
    for model in ("lstm", "node"):
        assert main(common + ["--model", model, "--engine", "fused", "--out", str(tmp_path / model)]) == 2
        assert "--engine fused: it has no odelab recurrent cell" in capsys.readouterr().err
    assert not (tmp_path / "a" / "checkpoint.pt").exists() and not (tmp_path / "lstm" / "checkpoint.pt").exists()
    assert main(common + ["--model", "lem", "--engine", "fused", "--out", str(tmp_path / "lem")]) == 0
