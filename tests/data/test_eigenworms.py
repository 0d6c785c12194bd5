"""EigenWorms from local UEA files (Rusch et al. 2022, §3.3): tiny ``.ts`` / ``.arff`` files written here (12 training
and 8 test cases of 50 steps, 6 channels); exact values and labels, the official merged split (checked against
indices computed once with scikit-learn), ``length`` / ``stride``, the errors, the task's protocol, the paper's table
and one ``odelab fit eigenworms`` run."""
import json
import math

import numpy as np
import pytest
import torch

from odelab.cli import main
from odelab.data.eigenworms import eigenworms, read_file, split_indices, split_sizes
from odelab.data.tasks import TASKS, settings
from odelab.training.reproduce import TABLES

LABELS = ("1", "2", "3", "4", "5")


def make_cases(count, steps=50, start=0, seed=0):
    """Values with 3 decimals (exact to compare once parsed), channel 0 of step 0 the case's index in the merged
    data (``start`` + its row), labels cycling 1 … 5."""
    rng = np.random.default_rng(seed + start)
    values = rng.integers(-99999, 99999, (count, steps, 6)) / 1000
    values[:, 0, 0] = np.arange(start, start + count)
    return values, [LABELS[(start + i) % 5] for i in range(count)]


def text(v):
    return f"{v:.3f}"


def write_ts(path, values, labels, header=None, line=None):
    """A UEA .ts file; ``header`` replaces the header lines, ``line(i, text) -> text`` edits case i's line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = header if header is not None else [
        "# written by the test", "@problemName EigenWorms", "@timeStamps false", "@missing false",
        "@univariate false", "@dimensions 6", "@equalLength true", f"@seriesLength {values.shape[1]}",
        "@classLabel true " + " ".join(LABELS)]
    rows = []
    for i, (case, label) in enumerate(zip(values, labels)):
        row = ":".join(",".join(map(text, case[:, c])) for c in range(case.shape[1])) + ":" + label
        rows.append(line(i, row) if line else row)
    path.write_text("\n".join(header + ["@data"] + rows) + "\n")


def write_arff(path, values, labels):
    """Weka's relational format as the UEA archive writes it: the channels in one quoted string, a literal \\n
    between them, then the label."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["% the test's", "@relation EigenWorms", "", "@attribute eigenWorms relational"]
    lines += [f"  @attribute t{t + 1} numeric" for t in range(values.shape[1])]
    lines += ["@end eigenWorms", "@attribute target {" + ",".join(LABELS) + "}", "", "@data"]
    for case, label in zip(values, labels):
        lines.append("'" + "\\n".join(",".join(map(text, case[:, c])) for c in range(6)) + "'," + label)
    path.write_text("\n".join(lines) + "\n")


def write_pair(folder, fmt="ts", train=12, test=8, steps=50):
    """EigenWorms_TRAIN / _TEST in ``folder``; returns (merged values, merged labels)."""
    write = write_ts if fmt == "ts" else write_arff
    tr, tr_labels = make_cases(train, steps)
    te, te_labels = make_cases(test, steps, start=train)
    write(folder / f"EigenWorms_TRAIN.{fmt}", tr, tr_labels)
    write(folder / f"EigenWorms_TEST.{fmt}", te, te_labels)
    return np.concatenate([tr, te]), tr_labels + te_labels


def case_index(inputs):
    return inputs[:, 0, 0].round().long().tolist()


# train_test_split(range(n), test_size=0.3, random_state=1234), then its second part split 50/50 with the same
# seed, as the official data.py; computed once with scikit-learn 1.9.1 (numpy 2.4): (validation, test) indices
SKLEARN_SPLITS = {
    259: ([95, 231, 48, 6, 59, 250, 160, 238, 117, 100, 125, 165, 148, 147, 67, 31, 32, 253, 226, 9, 224, 258, 43,
           92, 243, 22, 44, 167, 71, 131, 51, 111, 138, 40, 173, 5, 132, 256, 257],
          [212, 217, 182, 73, 29, 94, 170, 169, 157, 106, 91, 63, 77, 245, 210, 74, 141, 97, 215, 54, 65, 153, 254,
           108, 187, 190, 101, 52, 181, 110, 227, 7, 58, 66, 99, 168, 93, 39, 183]),
    20: ([3, 14, 16], [2, 13, 5]),
}


def test_ts_values_labels_and_shapes_are_read_exactly(tmp_path):
    values, labels = make_cases(12)
    write_ts(tmp_path / "EigenWorms_TRAIN.ts", values, labels)
    series, read_labels, declared = read_file(tmp_path / "EigenWorms_TRAIN.ts")
    assert series.shape == (12, 50, 6) and series.dtype == np.float32
    assert np.array_equal(series, values.astype(np.float32)) and read_labels == labels and declared == LABELS


@pytest.mark.parametrize("layout", ["", "EigenWorms", "raw"])
@pytest.mark.parametrize("fmt", ["ts", "arff"])
def test_the_merged_files_give_the_official_split_in_every_layout_and_format(tmp_path, layout, fmt):
    values, labels = write_pair(tmp_path / layout if layout else tmp_path, fmt)
    data = eigenworms(tmp_path)
    assert data["meta"]["format"] == fmt and data["meta"]["classes"] == list(LABELS)
    assert data["meta"]["warnings"] == ["EigenWorms: 20 cases of 50 steps; the UEA files hold 259 of 17984"]
    for split, count in (("train", 14), ("valid", 3), ("test", 3)):
        x, y = data[split]
        assert x.shape == (count, 50, 6) and x.dtype == torch.float32 and y.dtype == torch.int64
        index = case_index(x)
        assert torch.equal(x, torch.from_numpy(values[index].astype(np.float32)))  # raw values: no normalisation
        assert y.tolist() == [LABELS.index(labels[i]) for i in index]  # "1" … "5" -> 0 … 4
    valid, test = SKLEARN_SPLITS[20]
    assert case_index(data["valid"][0]) == valid and case_index(data["test"][0]) == test
    assert sorted(case_index(data["train"][0]) + valid + test) == list(range(20))


@pytest.mark.parametrize("count", sorted(SKLEARN_SPLITS))
def test_the_split_is_train_test_split_computed_by_scikit_learn(count):
    train, valid, test = split_indices(count)
    assert (valid.tolist(), test.tolist()) == SKLEARN_SPLITS[count]
    assert sorted(np.concatenate([train, valid, test]).tolist()) == list(range(count))
    assert split_sizes(259) == (181, 39, 39) and len(train) == split_sizes(count)[0]


def test_the_split_rule_by_hand():
    """train_test_split(test_size=q): n_test = ⌈q n⌉, perm = RandomState(seed).permutation(n), first part
    perm[n_test:], second perm[:n_test]; written out for n = 10 (n_test = 3, then 2 of those 3 for the test)."""
    perm = np.random.RandomState(1234).permutation(10)
    inner = np.random.RandomState(1234).permutation(3)
    train, valid, test = split_indices(10)
    assert train.tolist() == perm[3:].tolist()
    assert valid.tolist() == [perm[:3][inner[2]]] and test.tolist() == perm[:3][inner[:2]].tolist()
    assert math.ceil(0.3 * 259) == 78 and split_sizes(10) == (7, 1, 2)


def test_the_split_matches_scikit_learn_when_it_is_installed():
    model_selection = pytest.importorskip("sklearn.model_selection")
    for count in (20, 37, 259):
        first, held = model_selection.train_test_split(np.arange(count), test_size=0.3, random_state=1234)
        second, third = model_selection.train_test_split(held, test_size=0.5, random_state=1234)
        assert [a.tolist() for a in split_indices(count)] == [first.tolist(), second.tolist(), third.tolist()]


def test_length_and_stride_keep_the_first_steps_then_every_kth(tmp_path):
    values, _ = write_pair(tmp_path)
    data = eigenworms(tmp_path, length=20, stride=3)
    x = data["train"][0]
    assert x.shape == (14, 7, 6) and data["meta"]["steps"] == 7 and data["meta"]["series_length"] == 50
    assert torch.equal(x, torch.from_numpy(values[case_index(x)][:, 0:20:3].astype(np.float32)))
    assert eigenworms(tmp_path, length="50")["test"][0].shape == (3, 50, 6)  # odelab reproduce --option gives text
    for options, message in (({"length": 51}, "length: expected at most 50"), ({"stride": 0}, "stride: expected an "
                             "integer >= 1"), ({"length": "ten"}, "length: expected an integer >= 1")):
        with pytest.raises(ValueError, match=message):
            eigenworms(tmp_path, **options)


def test_missing_files_are_all_named_with_the_folders_searched(tmp_path):
    with pytest.raises(ValueError, match="--data-root PATH"):
        eigenworms(None)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        eigenworms(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError) as error:
        eigenworms(tmp_path)
    message = str(error.value)
    for name in ("EigenWorms_TRAIN.ts", "EigenWorms_TEST.ts", "EigenWorms_TRAIN.arff", "EigenWorms_TEST.arff"):
        assert name in message
    assert str(tmp_path / "EigenWorms") in message and str(tmp_path / "raw") in message and "never downloads" in message
    write_pair(tmp_path)
    (tmp_path / "EigenWorms_TEST.ts").unlink()
    with pytest.raises(FileNotFoundError, match="missing EigenWorms_TEST.ts \\(or, for the .arff pair, "
                                                "EigenWorms_TRAIN.arff and EigenWorms_TEST.arff\\)"):
        eigenworms(tmp_path)


def damaged(tmp_path, **write):
    """The training file with one change (default header: 9 lines, ``@data`` on line 10, case i on line 11 + i);
    returns its path."""
    values, labels = make_cases(12)
    path = tmp_path / "EigenWorms_TRAIN.ts"
    write_ts(path, values, labels, **write)
    te, te_labels = make_cases(8, start=12)
    write_ts(tmp_path / "EigenWorms_TEST.ts", te, te_labels)
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda i, row: row.replace(",", ",x", 1) if i == 2 else row, "line 13, channel 1: 'x.*' is not a number"),
    (lambda i, row: row.replace(",", ",?,", 1) if i == 2 else row, "line 13, channel 1: '\\?' is not a number "
                                                                   "\\(a missing value"),
    (lambda i, row: row.replace(":", ",", 1) if i == 3 else row, "line 14: 5 channel\\(s\\) separated by ':', "
                                                                 "expected 6"),
    (lambda i, row: row.rsplit(":", 1)[0] + ":" if i == 0 else row, "line 11: no class label"),
    (lambda i, row: row.rsplit(":", 1)[0] + ":7" if i == 4 else row, "line 15: class label '7' is not one of the "
                                                                     "labels its header declares \\(1, 2, 3, 4, 5\\)"),
    (lambda i, row: row.replace(",", ",1e999,", 1) if i == 1 else row, "line 12, channel 1: a non-finite value"),
    (lambda i, row: ":".join(part.rsplit(",", 1)[0] for part in row.split(":")[:6]) + ":1" if i == 5 else row,
     "line 16, channel 1: 49 values, expected 50 \\(the header's @seriesLength\\)"),
])
def test_a_malformed_line_is_a_value_error_naming_the_file_and_line(tmp_path, edit, message):
    path = damaged(tmp_path, line=edit)
    with pytest.raises(ValueError, match=message) as error:
        eigenworms(tmp_path)
    assert str(error.value).startswith(str(path))


def test_lengths_labels_and_headers_are_checked(tmp_path):
    bare = ["@problemName EigenWorms"]  # no declared length or labels: the first case sets them
    path = damaged(tmp_path, header=bare, line=lambda i, row: row.replace(",", ",1.5,", 1) if i == 3 else row)
    with pytest.raises(ValueError, match="line 6, channel 1: 51 values, expected 50 \\(as the first case, line 3\\)"):
        eigenworms(tmp_path)
    damaged(tmp_path, header=bare, line=lambda i, row: row.rsplit(":", 1)[0] + ":X" if i == 9 else row)
    with pytest.raises(ValueError, match="line 12: class label 'X', a 6th one"):
        eigenworms(tmp_path)
    te, te_labels = make_cases(8, start=12)  # a test label outside the training file's declaration
    damaged(tmp_path)
    write_ts(tmp_path / "EigenWorms_TEST.ts", te, ["1"] * 7 + ["6"], header=bare)
    with pytest.raises(ValueError, match="EigenWorms_TEST.ts: case 8 has the class label '6', not one of 1, 2, 3, 4, 5 "
                                         "\\(declared in .*EigenWorms_TRAIN.ts\\)"):
        eigenworms(tmp_path)
    te, te_labels = make_cases(8, steps=40, start=12)  # the test file's series are shorter
    damaged(tmp_path)
    write_ts(tmp_path / "EigenWorms_TEST.ts", te, te_labels)
    with pytest.raises(ValueError, match="EigenWorms_TEST.ts: series of 40 steps, .*EigenWorms_TRAIN.ts has 50"):
        eigenworms(tmp_path)
    for header, message in ((["@classLabel true 1 2 3 4"], "line 1: the header declares the class labels 1, 2, 3, 4; "
                             "EigenWorms has 5"), (["@dimensions 3"], "line 1: '@dimensions 3', expected 6 channels"),
                            (["@classLabel false"], "the file has no class labels"),
                            (["@timeStamps true"], "time-stamped series are not supported")):
        path = damaged(tmp_path, header=header)
        with pytest.raises(ValueError, match=message):
            eigenworms(tmp_path)
    path.write_text("@problemName EigenWorms\n1,2:1\n")
    with pytest.raises(ValueError, match="line 2: expected a header line starting with '@'"):
        eigenworms(tmp_path)
    path.write_text("@problemName EigenWorms\n")
    with pytest.raises(ValueError, match="no '@data' line"):
        eigenworms(tmp_path)


def test_a_malformed_arff_line_names_the_file_and_line(tmp_path):
    write_pair(tmp_path, "arff")
    path = tmp_path / "EigenWorms_TEST.arff"
    lines = path.read_text().splitlines()
    data = lines.index("@data")
    lines[data + 2] = lines[data + 2].replace("'", "", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"line {data + 3}: expected 'CHANNEL"):
        eigenworms(tmp_path)
    lines[data + 2] = "'" + lines[data + 2].replace("\\n", ",", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=f"line {data + 3}: 5 channel\\(s\\) separated by '\\\\n'") as error:
        eigenworms(tmp_path)
    assert str(error.value).startswith(str(path))


def test_the_task_and_the_table_follow_the_paper():
    task = TASKS["eigenworms"]
    assert settings(task, "paper", "lem") == dict(hidden_size=32, epochs=50, lr=2.3e-3, batch_size=8)
    assert settings(task, "quick", "lstm")["hidden_size"] == 32
    assert task.classes == 5 and task.target == "last" and task.loss == "cross_entropy" and task.plot == "classes"
    assert task.options == {"path": "data_root", "length": "length", "stride": "stride"}
    assert task.model_options("lem", {}) == {"dt": 1.6e-3} and task.model_options("cornn", {}) == {}
    assert task.model_options("unicornn", {}) == {"dt": [2.81e-5, 3.43e-2], "alpha": 0.0, "num_layers": 2}
    assert task.model_options("lem", {"stride": 4}) == {"dt": 1.6e-3 * 4}
    table = TABLES["eigenworms"]
    assert table.metric == "accuracy" and table.winner == "lem" and set(table.models) == {"lem", "unicornn", "cornn",
                                                                                          "lstm"}
    assert table.paper_for("path=/data/uea") == {"lstm": (38.5, 10.1), "cornn": (86.7, 3.0), "unicornn": (90.3, 3.0),
                                                 "lem": (92.3, 1.8)}


def test_cli_fit_eigenworms_on_tiny_files(tmp_path, capsys):
    write_pair(tmp_path / "uea" / "EigenWorms")
    out = tmp_path / "run"
    argv = ["fit", "eigenworms", "--data-root", str(tmp_path / "uea"), "--hidden", "3", "--epochs", "1",
            "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "train (14, 50, 6), valid (3, 50, 6), test (3, 50, 6)" in printed and "split 14/3/3" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["model_options"] == {"dt": 1.6e-3} and result["config"]["batch_size"] == 8
    assert result["test_sequences"] == 3 and 0 <= result["baselines"]["majority class"] <= 1


def test_cli_missing_files_are_one_line_naming_them(tmp_path, capsys):
    argv = ["fit", "eigenworms", "--data-root", str(tmp_path), "--no-progress", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "EigenWorms_TRAIN.ts and EigenWorms_TEST.ts" in line and "never downloads" in line
