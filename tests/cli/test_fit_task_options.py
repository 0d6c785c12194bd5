"""Task options of ``odelab fit`` added with the classification tasks: ``--horizon``/``--stride`` reach the enso and
Mackey--Glass loaders, ``--noise`` the frequency loader, and each is refused for the tasks that do not take it;
the ``node`` preset gets the spiral/Duffing sample spacing as its ``dt``."""
import pytest

import odelab.data.tasks
from odelab.cli import main
from odelab.data.tasks import TASKS


def error_line(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("task", ["enso", "mackey-glass"])
def test_horizon_and_stride_reach_the_delay_loaders(task, monkeypatch, tmp_path):
    seen = {}

    def loader(name):
        def load(seed=1234, horizon=1, stride=1, **rest):
            seen.update(name=name, horizon=horizon, stride=stride)
            raise ValueError("stop here")  # reported as a one-line error: the loader was reached
        return load

    monkeypatch.setattr(odelab.data.tasks, "enso", loader("enso"))
    monkeypatch.setattr(odelab.data.tasks, "mackey_glass", loader("mackey_glass"))
    argv = ["fit", task, "--horizon", "3", "--stride", "2", "--no-progress", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    assert seen == {"name": task.replace("-", "_"), "horizon": 3, "stride": 2}
    assert TASKS[task].options == {"horizon": "horizon", "stride": "stride"}


@pytest.mark.parametrize("argv, message", [
    (["fit", "fhn", "--stride", "2"],
     "--stride: only for the task(s) bidmc-hr, bidmc-rr, bidmc-spo2, eigenworms, enso, mackey-glass"),
    (["fit", "enso", "--noise", "0"], "--noise: only for the task(s) frequency"),
    (["fit", "frequency", "--length", "5"],
     "--length: only for the task(s) adding, bidmc-hr, bidmc-rr, bidmc-spo2, copy"),
    (["fit", "enso", "--stride", "0"], "argument --stride: expected an integer >= 1"),
    (["fit", "frequency", "--noise", "-1"], "argument --noise"),
    (["fit", "enso", "--reading", "official"], "--reading: only for the task(s) duffing, spiral"),
    (["fit", "spiral", "--reading", "paper"], "argument --reading: invalid choice"),
    (["fit", "fhn", "--valid-window", "250"], "--valid-window: only for the task(s) duffing, spiral"),
    (["fit", "duffing", "--valid-window", "1"], "argument --valid-window: expected an integer >= 2"),
])
def test_task_options_are_refused_where_they_do_not_apply(argv, message, capsys, monkeypatch):
    for task in TASKS.values():
        monkeypatch.setattr(task, "load", lambda *a, **k: pytest.fail("data loaded"))
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    assert message in error_line(capsys)


@pytest.mark.parametrize("task", ["spiral", "duffing"])
def test_the_node_preset_steps_at_the_sample_spacing(task):
    assert TASKS[task].model_options("node", {}) == {"dt": 25.0 / 999}
    assert TASKS[task].model_options("lrcu-a", {}) == {}
    assert TASKS[task].sample_dt == 25.0 / 999


def test_the_official_reading_trains_and_reports_the_test_mae(tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    argv = ["fit", "duffing", "--reading", "official", "--model", "lrcu-a", "--epochs", "1", "--batch-size", "256",
            "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "MAE" in printed and "test (1 sequences)" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["data"]["metric"] == "MAE" and result["settings"]["reading"] == "official"
    # an MAE of one trajectory lies between RMSE / sqrt(n) and the RMSE
    assert result["test_rmse"] / (999 * 2) ** 0.5 <= result["test_mae"] <= result["test_rmse"]
