"""Person Activity (Farsang et al. 2024, §4.2; the ODE-LSTM loader's recipe) from a small ``ConfLongDemo_JSI.txt``
written here in the UCI file's format (recordings of a few persons, the 4 tags, all 11 activities, irregular
timestamps in .NET ticks): parsing, the one-hot order, the 11 -> 7 classes, the time gaps (100 ms -> 1.0, a
recording's first sample 5.0), the windows and their labels, the split, the errors, the task, the paper's table and
two ``odelab fit person-activity`` runs (an LRCU stepping by the gap, an LSTM reading it)."""
import json

import numpy as np
import pytest
import torch

from odelab.cli import main
from odelab.data.person_activity import (FILE, cut_windows, find_file, majority_class_accuracy, person_activity,
                                         read_recordings, split_indices)
from odelab.data.tasks import TASKS, settings
from odelab.models.heads import takes_time_gaps
from odelab.training.reproduce import TABLES
from odelab.training.run import build_regressor

# the UCI tags in the loader's one-hot order: left ankle, right ankle, chest, belt
TAGS = ("010-000-024-033", "010-000-030-096", "020-000-033-111", "020-000-032-221")
CLASS_OF = {"lying down": 0, "lying": 0, "sitting down": 1, "sitting": 1, "standing up from lying": 2,
            "standing up from sitting": 2, "standing up from sitting on the ground": 2, "walking": 3, "falling": 4,
            "on all fours": 5, "sitting on the ground": 6}
ACTIVITIES = tuple(CLASS_OF)
START = 633790226051280329  # a real first timestamp (ticks of 100 ns)


def make_recording(name, count, seed):
    """``count`` rows (name, tag, ticks, date, x, y, z, activity): tags cycling, irregular gaps of 0 … 0.4 s in
    ticks (a few exactly 0, 25 ms and 100 ms), coordinates with 4 decimals, activities in blocks of 7 samples."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(0, 4 * 10 ** 6, count)
    gaps[1:4] = (0, 250_000, 1_000_000)[:max(0, count - 1)]
    ticks = START + seed * 10 ** 10 + np.cumsum(gaps)
    xyz = np.round(rng.uniform(-1, 5, (count, 3)), 4)
    return [(name, TAGS[(i + seed) % 4], int(ticks[i]), "27.05.2009 14:03:25:127", *xyz[i],
             ACTIVITIES[(i // 7 + seed) % len(ACTIVITIES)]) for i in range(count)]


def line(row):
    return ",".join(str(v) for v in row)


def write_file(path, recordings, newline="\n", edit=None):
    """The rows of every recording, one per line; ``edit(number, text) -> text`` changes line ``number`` (1-based)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [line(r) for rec in recordings for r in rec]
    if edit is not None:
        rows = [edit(i + 1, text) for i, text in enumerate(rows)]
    path.write_bytes((newline.join(rows) + newline).encode())
    return path


def default_recordings():
    """Four recordings (persons A, B, C); the last, C01, is the one the loader drops."""
    return [make_recording("A01", 100, 1), make_recording("A02", 90, 2), make_recording("B01", 120, 3),
            make_recording("C01", 60, 4)]


def loader_gaps(ticks):
    """The ODE-LSTM loader's time feature by its own float chain: ticks / 10⁵, the difference / 1000, · 1000 / 10;
    0.05 · 1000 / 10 for the first sample."""
    millis = np.asarray(ticks, dtype=np.int64) / (100 * 1000)
    return np.concatenate([[0.05 * 1000 / 10.0], (millis[1:] - millis[:-1]) / 1000.0 * 1000 / 10.0])


def test_rows_give_one_hot_tags_coordinates_classes_and_gaps(tmp_path):
    recordings = default_recordings()
    read = read_recordings(write_file(tmp_path / FILE, recordings))
    assert [r["name"] for r in read] == ["A01", "A02", "B01"]  # C01, the file's last, is dropped as by the loader
    assert [r["first_line"] for r in read] == [1, 101, 191]
    for rec, rows in zip(read, recordings):
        assert rec["features"].shape == (len(rows), 7) and rec["features"].dtype == np.float32
        one_hot = np.zeros((len(rows), 4), dtype=np.float32)
        one_hot[np.arange(len(rows)), [TAGS.index(r[1]) for r in rows]] = 1
        assert np.array_equal(rec["features"][:, :4], one_hot)
        assert np.array_equal(rec["features"][:, 4:], np.array([r[4:7] for r in rows], dtype=np.float32))
        assert rec["labels"].tolist() == [CLASS_OF[r[7]] for r in rows]
        ticks = np.array([r[2] for r in rows])
        assert rec["gaps"][0] == 5.0  # the first sample of a recording: 500 ms
        assert np.array_equal(rec["gaps"][1:], np.diff(ticks) / 10 ** 6)  # 10⁶ ticks = 100 ms -> 1.0
        assert rec["gaps"][1:4].tolist() == [0.0, 0.25, 1.0]  # 0, 25 ms and 100 ms
        np.testing.assert_allclose(rec["gaps"], loader_gaps(ticks), rtol=0, atol=3e-4)  # its float64 rounding
    # the one-hot order: tag 010-000-024-033 -> feature 0, …, 020-000-032-221 -> feature 3
    first = {r[1]: rec["features"][i, :4].argmax() for rec, rows in zip(read, recordings) for i, r in enumerate(rows)}
    assert first == {tag: k for k, tag in enumerate(TAGS)}
    every = read_recordings(tmp_path / FILE, last_recording=True)
    assert [r["name"] for r in every] == ["A01", "A02", "B01", "C01"] and every[3]["gaps"][0] == 5.0


def test_all_eleven_activities_map_to_seven_classes(tmp_path):
    rows = [("A01", TAGS[i % 4], START + 10 ** 5 * i, "d", 1.0, 2.0, 3.0, a) for i, a in enumerate(ACTIVITIES)]
    read = read_recordings(write_file(tmp_path / FILE, [rows, make_recording("Z01", 3, 9)]))
    assert read[0]["labels"].tolist() == [0, 0, 1, 1, 2, 2, 2, 3, 4, 5, 6]


def test_crlf_lines_and_blank_lines_read_the_same(tmp_path):
    recordings = default_recordings()
    plain = read_recordings(write_file(tmp_path / "a" / FILE, recordings))
    crlf = read_recordings(write_file(tmp_path / "b" / FILE, recordings, newline="\r\n",
                                      edit=lambda n, text: text + "\n" if n == 50 else text))
    assert len(plain) == len(crlf) == 3
    for p, c in zip(plain, crlf):
        assert all(np.array_equal(p[k], c[k]) for k in ("features", "gaps", "labels"))


def test_windows_of_32_with_stride_16_keep_per_step_labels_and_gaps(tmp_path):
    data = person_activity(write_file(tmp_path / FILE, default_recordings()).parent)
    read = read_recordings(tmp_path / FILE)
    x, y = cut_windows(read)
    # starts 0, 16, … while < n − 32: A01 (100) 0…64 -> 5, A02 (90) 0…48 -> 4, B01 (120) 0…80 -> 6
    assert x.shape == (15, 32, 8) and y.shape == (15, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    starts = [(r, s) for r, n in enumerate((100, 90, 120)) for s in range(0, n - 32, 16)]
    assert [s for r, s in starts] == [0, 16, 32, 48, 64, 0, 16, 32, 48, 0, 16, 32, 48, 64, 80]
    for k, (r, s) in enumerate(starts):
        rec = read[r]
        assert torch.equal(x[k, :, :7], torch.from_numpy(rec["features"][s:s + 32]))
        assert torch.equal(x[k, :, 7], torch.from_numpy(rec["gaps"][s:s + 32].astype(np.float32)))
        assert torch.equal(y[k], torch.from_numpy(rec["labels"][s:s + 32]))
    assert x[0, 0, 7] == 5.0 and x[1, 0, 7] == float(np.float32(read[0]["gaps"][16]))  # a window inside keeps its gap
    assert data["meta"]["windows"] == 15 and data["meta"]["recordings"] == ["A01", "A02", "B01"]
    assert data["meta"]["samples"] == 310 and len(data["meta"]["sha256"]) == 64
    rows = make_recording("A01", 33, 1), make_recording("A02", 32, 2), make_recording("Z01", 5, 3)
    x, _ = cut_windows(read_recordings(write_file(tmp_path / "edge" / FILE, rows)))
    assert len(x) == 1  # 33 samples: one window; 32: none (the loader's range stops before n − 32)


def test_split_is_the_loaders_test_windows_and_a_seeded_tenth_to_validate(tmp_path):
    recordings = [make_recording(f"{p}0{r}", 100 + 10 * r, 10 * i + r) for i, p in enumerate("ABC")
                  for r in range(1, 4)] + [make_recording("E05", 40, 99)]
    root = write_file(tmp_path / "data" / "person" / FILE, recordings).parents[1]  # the downloaders' data/person/
    x, y = cut_windows(read_recordings(root / "person" / FILE))
    count = len(x)
    permutation = np.random.RandomState(98841).permutation(count)
    test_size = int(0.2 * count)
    a, b, c = (person_activity(root, seed=s) for s in (1234, 1234, 7))
    for data in (a, c):
        assert torch.equal(data["test"][0], x[permutation[:test_size]])  # the loader's test windows, every seed
        assert torch.equal(data["test"][1], y[permutation[:test_size]])
        sizes = {k: len(data[k][0]) for k in ("train", "valid", "test")}
        assert sizes == {"train": count - test_size - (count - test_size) // 10, "valid": (count - test_size) // 10,
                         "test": test_size}
        together = torch.cat([data["train"][0], data["valid"][0]])
        rest = x[permutation[test_size:]]
        assert len(together) == len(rest) and {t.numpy().tobytes() for t in together} == \
            {t.numpy().tobytes() for t in rest}
    assert all(torch.equal(a[k][i], b[k][i]) for k in ("train", "valid", "test") for i in (0, 1))  # deterministic
    assert not torch.equal(a["valid"][0], c["valid"][0])  # another seed validates on other windows
    index = split_indices(count, 1234)
    assert list(index["train"]) == [i for i in permutation[test_size:] if i not in set(index["valid"])]  # order kept
    assert len(person_activity(root, valid_size=5)["valid"][0]) == 5
    for bad in (0, count - test_size, 2.5):
        with pytest.raises(ValueError, match="valid_size: expected an integer"):
            split_indices(count, 1234, valid_size=bad)
    with pytest.raises(ValueError, match="4 window"):
        split_indices(4, 1234)


def test_majority_class_at_every_step(tmp_path):
    data = person_activity(write_file(tmp_path / FILE, default_recordings()).parent)
    majority = torch.bincount(data["train"][1].flatten(), minlength=7).argmax()
    assert majority_class_accuracy(data) == pytest.approx(float((data["test"][1] == majority).float().mean()))
    assert 0 < majority_class_accuracy(data) < 1


def test_the_file_is_found_in_the_folder_one_below_or_given_itself(tmp_path):
    write_file(tmp_path / "uci" / "Localization" / FILE, default_recordings())
    assert find_file(tmp_path / "uci") == tmp_path / "uci" / "Localization" / FILE
    assert find_file(tmp_path / "uci" / "Localization" / FILE) == tmp_path / "uci" / "Localization" / FILE
    write_file(tmp_path / "uci" / FILE, default_recordings())
    assert find_file(tmp_path / "uci") == tmp_path / "uci" / FILE  # PATH itself first


def test_a_missing_file_names_it_and_the_folders_searched(tmp_path):
    (tmp_path / "other").mkdir()
    with pytest.raises(FileNotFoundError) as err:
        person_activity(tmp_path)
    message = str(err.value)
    assert FILE in message and str(tmp_path / "person") in message and "1 other folder" in message
    assert "never downloads" in message
    with pytest.raises(FileNotFoundError, match="no such folder"):
        person_activity(tmp_path / "absent")
    with pytest.raises(ValueError, match="--data-root PATH"):
        person_activity(None)


@pytest.mark.parametrize("edit, message", [
    (lambda text: text.rsplit(",", 1)[0], "line 7: 7 comma-separated field"),
    (lambda text: text.rsplit(",", 1)[0] + ",jumping", "line 7: unknown activity 'jumping'"),
    (lambda text: text.replace("A01,010-000-0", "A01,999-000-0").replace("A01,020-000-0", "A01,999-000-0"),
     "line 7: unknown tag id '999-000-"),
    (lambda text: text.replace(",6337", ",x6337"), "line 7: timestamp 'x6337"),
    (lambda text: ",".join(text.split(",")[:4] + ["nan"] + text.split(",")[5:]), "line 7: coordinates nan"),
    (lambda text: ",".join(text.split(",")[:4] + ["1,5"] + text.split(",")[5:]), "line 7: 9 comma-separated"),
    (lambda text: ",".join(text.split(",")[:2] + [str(START)] + text.split(",")[3:]),
     "line 7: timestamp 633790226051280329 is earlier than the previous sample's"),
])
def test_a_malformed_line_is_a_value_error_naming_the_file_and_line(tmp_path, edit, message):
    path = write_file(tmp_path / FILE, default_recordings(), edit=lambda n, text: edit(text) if n == 7 else text)
    with pytest.raises(ValueError) as err:
        person_activity(tmp_path)
    assert str(err.value).startswith(f"{path}, ") and message in str(err.value)


def test_too_few_samples_or_recordings_are_errors(tmp_path):
    write_file(tmp_path / "one" / FILE, [make_recording("A01", 200, 1)])
    with pytest.raises(ValueError, match="no recording before the last one"):
        person_activity(tmp_path / "one")
    write_file(tmp_path / "short" / FILE, [make_recording("A01", 30, 1), make_recording("A02", 30, 2)])
    with pytest.raises(ValueError, match="no recording has more than 32 samples"):
        person_activity(tmp_path / "short")


def test_the_task_and_the_table_follow_the_paper():
    task = TASKS["person-activity"]
    paper = dict(hidden_size=100, epochs=100, lr=1e-3, batch_size=128, optimizer="rmsprop-keras")
    assert settings(task, "paper", "lstm") == settings(task, "paper", "gru") == paper
    assert settings(task, "paper", "lrcu-a") == settings(task, "paper", "lrcu-s") == {**paper, "hidden_size": 64}
    assert settings(task, "quick", "lstm")["optimizer"] == "rmsprop-keras"
    assert task.loss == "cross_entropy" and task.classes == 7 and task.target == "sequence" and task.time_gaps
    assert task.options == {"path": "data_root"} and set(task.baselines) == {"majority class"}
    # the LRCU steps by the gap (7 input features), the LSTM reads it as an 8th
    lrcu, lstm = (build_regressor(task, m, 8, 3, 7) for m in ("lrcu-a", "lstm"))
    assert lrcu.gaps_as_step and takes_time_gaps(lrcu.body) and not lstm.gaps_as_step
    assert lrcu(torch.rand(2, 32, 8)).shape == lstm(torch.rand(2, 32, 8)).shape == (2, 32, 7)
    table = TABLES["person-activity"]
    assert table.metric == "accuracy" and table.unit == "%" and table.winner == "lrcu-s"
    assert set(table.models) == {"lrcu-s", "lrcu-a", "lstm", "gru", "mgu"} and table.selection_options == ("path",)
    assert table.paper_for("path=/data/person") == {"lstm": (82.90, 0.31), "gru": (82.76, 0.41), "mgu": (83.35, 0.30),
                                                    "lrcu-a": (83.90, 0.34), "lrcu-s": (84.21, 0.26)}


@pytest.mark.parametrize("model", ["lrcu-a", "lstm"])
def test_cli_fit_person_activity_on_a_tiny_file(tmp_path, capsys, model):
    write_file(tmp_path / "data" / "person" / FILE, default_recordings())
    out = tmp_path / "run"
    argv = ["fit", "person-activity", "--data-root", str(tmp_path / "data"), "--model", model, "--hidden", "3",
            "--epochs", "1", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert "train (11, 32, 8), valid (1, 32, 8), test (3, 32, 8)" in capsys.readouterr().out
    result = json.loads((out / "results.json").read_text())
    assert result["config"]["optimizer"] == "rmsprop-keras" and result["config"]["batch_size"] == 128
    assert result["test_sequences"] == 3 and 0 <= result["test_accuracy"] <= 1
    assert 0 <= result["baselines"]["majority class"] <= 1 and result["data"]["windows"] == 15


def test_cli_missing_file_is_one_line_naming_it(tmp_path, capsys):
    argv = ["fit", "person-activity", "--data-root", str(tmp_path), "--no-progress", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert FILE in line and "never downloads" in line
