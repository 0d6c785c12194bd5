"""HAR-2 from a local "UCI HAR Dataset" folder (Erichson et al. 2025, §5, Table 1): tiny files in the archive's layout
written here (40 training and 10 test windows of 128 steps, 9 channels); parsing, channel order, the 2-class
grouping, the deterministic split, the standardisation, the errors, the task's protocol, the paper's table and one
``odelab fit har2`` run."""
import json

import numpy as np
import pytest
import torch

from odelab.cli import main
from odelab.data.har import CHANNELS, STEPS, har2, read_part, split_indices, two_classes
from odelab.data.tasks import TASKS, settings
from odelab.training.reproduce import TABLES


def make_part(count, start=0, seed=0):
    """Values with 4 decimals; channel c of window w starts at 1000·c + (start + w) (its identity); activities
    cycling 1 … 6."""
    rng = np.random.default_rng(seed + start)
    values = rng.integers(-9999, 9999, (count, STEPS, len(CHANNELS))) / 1e4
    values[:, 0, :] = 1000 * np.arange(len(CHANNELS))[None, :] + np.arange(start, start + count)[:, None]
    activities = np.array([(start + i) % 6 + 1 for i in range(count)])
    return values, activities


def write_part(folder, part, values, activities):
    signals = folder / part / "Inertial Signals"
    signals.mkdir(parents=True, exist_ok=True)
    for c, channel in enumerate(CHANNELS):
        lines = ["  " + " ".join(f"{v:.7e}" for v in row) for row in values[:, :, c]]  # UCI pads with spaces
        (signals / f"{channel}_{part}.txt").write_text("\n".join(lines) + "\n")
    (folder / part / f"y_{part}.txt").write_text("".join(f"{a}\n" for a in activities))


def write_dataset(root, train=40, test=10):
    folder = root / "UCI HAR Dataset"
    parts = {"train": make_part(train), "test": make_part(test, start=train)}
    for part, (values, activities) in parts.items():
        write_part(folder, part, values, activities)
    return folder, parts


def test_reads_values_in_channel_order(tmp_path):
    folder, parts = write_dataset(tmp_path)
    x, activities = read_part(folder, "train")
    assert x.shape == (40, STEPS, 9) and np.array_equal(activities, parts["train"][1])
    np.testing.assert_allclose(x, parts["train"][0], rtol=0, atol=1e-9)
    assert list(x[3, 0]) == [1000 * c + 3 for c in range(9)]  # channel c is CHANNELS[c]
    assert CHANNELS == ("body_acc_x", "body_acc_y", "body_acc_z", "body_gyro_x", "body_gyro_y", "body_gyro_z",
                        "total_acc_x", "total_acc_y", "total_acc_z")


def test_two_classes_group_the_activities():
    # Kusupati et al. 2018: {upstairs, sitting, laying} vs {walking, downstairs, standing}
    assert two_classes(np.arange(1, 7)).tolist() == [1, 0, 1, 0, 1, 0]


def test_split_is_carved_from_train_and_deterministic(tmp_path):
    train, valid = split_indices(7352)
    assert (len(train), len(valid)) == (6452, 900)
    assert not set(train) & set(valid) and len(set(train) | set(valid)) == 7352
    drawn = np.random.RandomState(1234).permutation(7352)  # the documented rule, written out
    assert np.array_equal(valid, np.sort(drawn[:900])) and np.array_equal(train, np.sort(drawn[900:]))
    assert np.all(np.diff(train) > 0) and np.all(np.diff(valid) > 0)
    _, parts = write_dataset(tmp_path)
    data = har2(tmp_path)  # the parent of "UCI HAR Dataset"
    again = har2(tmp_path / "UCI HAR Dataset")  # or the folder itself
    train, valid = split_indices(40)
    assert (len(train), len(valid)) == (35, 5)
    assert [len(data[k][1]) for k in ("train", "valid", "test")] == [35, 5, 10]
    for key in ("train", "valid", "test"):
        assert torch.equal(data[key][0], again[key][0]) and torch.equal(data[key][1], again[key][1])
        assert data[key][0].dtype == torch.float32 and data[key][1].dtype == torch.int64
        assert data[key][0].shape[1:] == (STEPS, 9)
    mean, std = np.array(data["meta"]["mean"]), np.array(data["meta"]["std"])
    raw = parts["train"][0]
    np.testing.assert_allclose(data["valid"][0].numpy(), (raw[valid] - mean) / std, rtol=1e-5, atol=1e-5)
    assert data["train"][1].tolist() == two_classes(parts["train"][1][train]).tolist()
    assert data["test"][1].tolist() == two_classes(parts["test"][1]).tolist()
    flat = data["train"][0].reshape(-1, 9)
    assert torch.allclose(flat.mean(0), torch.zeros(9), atol=1e-4) and torch.allclose(flat.std(0), torch.ones(9),
                                                                                         atol=1e-2)
    assert "split 35/5/10" in data["meta"]["notes"][0] and data["meta"]["warnings"]


def test_missing_file_names_it_and_the_folders(tmp_path):
    folder, _ = write_dataset(tmp_path)
    (folder / "test" / "Inertial Signals" / "body_gyro_y_test.txt").unlink()
    with pytest.raises(FileNotFoundError) as error:
        har2(tmp_path)
    message = str(error.value)
    assert "test/Inertial Signals/body_gyro_y_test.txt" in message and str(folder) in message
    assert f"searched {tmp_path}, {folder}" in message
    with pytest.raises(ValueError, match="--data-root PATH"):
        har2(None)


def test_ragged_rows_bad_labels_and_counts_are_errors(tmp_path):
    folder, _ = write_dataset(tmp_path)
    path = folder / "train" / "Inertial Signals" / "total_acc_z_train.txt"
    lines = path.read_text().splitlines()
    lines[2] = lines[2] + " 0.5"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"total_acc_z_train\.txt, line 3: 129 values, expected 128"):
        har2(tmp_path)
    lines[2] = " ".join(lines[2].split()[:-2] + ["nan?"])
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 3: 'nan\?' is not a number"):
        har2(tmp_path)
    write_dataset(tmp_path)
    (folder / "test" / "y_test.txt").write_text("1\n7\n")
    with pytest.raises(ValueError, match=r"y_test\.txt, line 2: activity '7', expected an integer 1 … 6"):
        har2(tmp_path)
    (folder / "test" / "y_test.txt").write_text("1\n2\n")
    with pytest.raises(ValueError, match="10 windows, .* has 2 labels"):
        har2(tmp_path)


def test_the_task_and_the_table_follow_the_paper():
    task = TASKS["har2"]
    assert settings(task, "paper", "taugru") == dict(hidden_size=64, epochs=100, lr=1.53e-3, batch_size=64)
    assert settings(task, "quick", "lem")["hidden_size"] == 64
    assert task.classes == 2 and task.target == "last" and task.loss == "cross_entropy" and task.plot == "classes"
    assert task.options == {"path": "data_root"}
    assert task.model_options("taugru", {}) == {"tau": 10.0} and task.model_options("lem", {}) == {}
    table = TABLES["har2"]
    assert table.metric == "accuracy" and table.winner == "taugru" and table.selection_options == ("path",)
    assert table.paper_for("path=/data") == {"gru": 93.6, "lstm": 93.7, "cornn": 97.2, "lem": 97.1, "taugru": 97.4}


def test_cli_fit_har2_on_tiny_files(tmp_path, capsys):
    write_dataset(tmp_path / "data")
    out = tmp_path / "run"
    argv = ["fit", "har2", "--data-root", str(tmp_path / "data"), "--hidden", "3", "--epochs", "1",
            "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "train (35, 128, 9), valid (5, 128, 9), test (10, 128, 9)" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["config"]["batch_size"] == 64 and result["test_sequences"] == 10
    assert 0 <= result["baselines"]["majority class"] <= 1
