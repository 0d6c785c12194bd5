"""BIDMC32 HR / RR / SpO2 from local regression-archive files (Rusch et al. 2022, §3.4; Rusch 2023, §3.5(d)): tiny
``.ts`` files written here (12 training and 8 test windows of 40 steps, 2 channels, a float target); exact values and
targets, the LEM code's split (``random_split`` with seed 123456, checked against ``torch.randperm``'s rule written
out in pure Python: MT19937 and the swap loop), ``length`` / ``stride``, the errors, the tasks' protocol and one
``odelab fit bidmc-hr`` run."""
import json

import numpy as np
import pytest
import torch

from odelab.cli import main
from odelab.data.bidmc import PROBLEMS, bidmc, bidmc_report, read_file, split_indices, split_sizes
from odelab.data.tasks import TASKS, mean_predictor_rmse, settings
from odelab.data.ts_files import read_series_file


def make_cases(count, steps=40, start=0, seed=0):
    """Values with 3 decimals (exact once parsed), channel 0 of step 0 the case's index in the merged data
    (``start`` + its row); targets 60.25 + 0.5 × index (exact in float32)."""
    rng = np.random.default_rng(seed + start)
    values = rng.integers(-99999, 99999, (count, steps, 2)) / 1000
    values[:, 0, 0] = np.arange(start, start + count)
    return values, 60.25 + 0.5 * np.arange(start, start + count)


def header(problem="BIDMC32HR", steps=40):
    return ["# written by the test", f"@problemName {problem}", "@timeStamps false", "@missing false",
            "@univariate false", "@dimensions 2", "@equalLength true", f"@seriesLength {steps}", "@targetLabel true"]


def write_ts(path, values, targets, head=None, line=None):
    """A regression .ts file; ``head`` replaces the header lines, ``line(i, text) -> text`` edits case i's line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = head if head is not None else header(path.name.split("_")[0], values.shape[1])
    rows = []
    for i, (case, target) in enumerate(zip(values, targets)):
        row = ":".join(",".join(f"{v:.3f}" for v in case[:, c]) for c in range(case.shape[1])) + f":{target}"
        rows.append(line(i, row) if line else row)
    path.write_text("\n".join(head + ["@data"] + rows) + "\n")


def write_pair(folder, problem="BIDMC32HR", train=12, test=8, steps=40):
    """PROBLEM_TRAIN / _TEST in ``folder``; returns (merged values, merged targets)."""
    tr, tr_y = make_cases(train, steps)
    te, te_y = make_cases(test, steps, start=train)
    write_ts(folder / f"{problem}_TRAIN.ts", tr, tr_y)
    write_ts(folder / f"{problem}_TEST.ts", te, te_y)
    return np.concatenate([tr, te]), np.concatenate([tr_y, te_y])


def case_index(inputs):
    return inputs[:, 0, 0].round().long().tolist()


def mt19937(seed):
    """The 32-bit Mersenne Twister (Matsumoto & Nishimura 1998) seeded by init_genrand: torch's CPU generator."""
    state = [seed & 0xFFFFFFFF]
    for j in range(1, 624):
        state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + j) & 0xFFFFFFFF)
    index = 624
    while True:
        if index == 624:
            for k in range(624):
                y = (state[k] & 0x80000000) | (state[(k + 1) % 624] & 0x7FFFFFFF)
                state[k] = state[(k + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            index = 0
        y = state[index]
        index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        yield y ^ (y >> 18)


def randperm(n, seed):
    """torch.randperm(n) on the CPU, written out: from 0 … n − 1, swap r[i] and r[i + u mod (n − i)]."""
    r, draws = list(range(n)), mt19937(seed)
    for i in range(n - 1):
        z = next(draws) % (n - i)
        r[i], r[i + z] = r[i + z], r[i]
    return r


def test_the_written_out_generator_is_the_mersenne_twister():
    draws = mt19937(5489)  # the reference implementation's default seed: its first outputs
    assert [next(draws) for _ in range(3)] == [3499211612, 581869302, 3890346734]


@pytest.mark.parametrize("count", [20, 37, 7949])
def test_the_split_is_the_lem_codes_random_split(count):
    """split_indices = random_split(range(n), [train, rest], seed 123456), then random_split(rest, [test, valid])
    with a fresh generator of the same seed; both checked against torch's random_split and the rule written out."""
    train, valid, test = split_indices(count)
    n_train, n_valid, n_test = split_sizes(count)
    perm = randperm(count, 123456)
    rest = perm[n_train:]
    inner = randperm(len(rest), 123456)
    assert train.tolist() == perm[:n_train]
    assert test.tolist() == [rest[i] for i in inner[:n_test]] and valid.tolist() == [rest[i] for i in inner[n_test:]]
    first, second = torch.utils.data.random_split(range(count), [n_train, count - n_train],
                                                  generator=torch.Generator().manual_seed(123456))
    third, fourth = torch.utils.data.random_split(second, [n_test, n_valid],
                                                  generator=torch.Generator().manual_seed(123456))
    assert [list(part) for part in (first, fourth, third)] == [a.tolist() for a in (train, valid, test)]
    assert sorted(train.tolist() + valid.tolist() + test.tolist()) == list(range(count))


def test_the_split_sizes():
    assert split_sizes(7949) == (5565, 1192, 1192)  # the LEM code's [5565, 2384] then [1192, 1192]
    assert split_sizes(20) == (14, 3, 3) and split_sizes(21) == (15, 3, 3) and split_sizes(22) == (16, 3, 3)
    assert split_sizes(7) == (5, 1, 1)
    with pytest.raises(ValueError, match="6 cases, too few"):
        split_sizes(6)
    train, valid, test = split_indices(7949)  # pinned: the official split's first windows
    assert (train[:3].tolist(), valid[:3].tolist(), test[:3].tolist()) == ([6018, 4595, 84], [3909, 350, 5400],
                                                                           [7826, 3524, 6568])


def test_values_and_targets_are_read_exactly(tmp_path):
    values, targets = make_cases(12)
    write_ts(tmp_path / "BIDMC32HR_TRAIN.ts", values, targets)
    series, read = read_file(tmp_path / "BIDMC32HR_TRAIN.ts")
    assert series.shape == (12, 40, 2) and series.dtype == np.float32 and read.dtype == np.float64
    assert np.array_equal(series, values.astype(np.float32)) and np.array_equal(read, targets)


@pytest.mark.parametrize("layout", ["", "BIDMC32HR", "raw/BIDMC32HR", "raw"])
def test_the_merged_files_give_the_official_split_in_every_layout(tmp_path, layout):
    values, targets = write_pair(tmp_path / layout if layout else tmp_path)
    data = bidmc(tmp_path)
    meta = data["meta"]
    assert meta["problem"] == "BIDMC32HR" and meta["unit"] == "beats per minute" and meta["steps"] == 40
    assert meta["warnings"] == ["BIDMC32HR: 20 cases of 40 steps; the archive's files hold 7949 of 4000"]
    assert "12 + 8 cases merged, split 14/3/3" in meta["notes"][0] and "not normalised" in meta["notes"][0]
    train, valid, test = split_indices(20)
    for split, rows in (("train", train), ("valid", valid), ("test", test)):
        x, y = data[split]
        assert x.shape == (len(rows), 40, 2) and x.dtype == torch.float32
        assert y.shape == (len(rows), 1) and y.dtype == torch.float32
        assert case_index(x) == rows.tolist()
        assert torch.equal(x, torch.from_numpy(values[rows].astype(np.float32)))  # raw values: no normalisation
        assert torch.equal(y[:, 0], torch.from_numpy(targets[rows].astype(np.float32)))  # raw targets (bpm)


@pytest.mark.parametrize("target", ["rr", "spo2"])
def test_the_other_targets_read_their_own_files(tmp_path, target):
    write_pair(tmp_path / PROBLEMS[target], PROBLEMS[target])
    write_pair(tmp_path / "BIDMC32HR", train=5, test=5)  # not read
    data = bidmc(tmp_path, target)
    assert data["meta"]["problem"] == PROBLEMS[target] and data["train"][0].shape == (14, 40, 2)
    assert data["meta"]["unit"] == {"rr": "breaths per minute", "spo2": "%"}[target]
    with pytest.raises(ValueError, match="target: expected one of hr, rr, spo2, got 'bp'"):
        bidmc(tmp_path, "bp")


def test_length_and_stride_keep_the_first_steps_then_every_kth(tmp_path):
    values, _ = write_pair(tmp_path)
    data = bidmc(tmp_path, length=20, stride=3)
    x = data["train"][0]
    assert x.shape == (14, 7, 2) and data["meta"]["steps"] == 7 and data["meta"]["series_length"] == 40
    assert torch.equal(x, torch.from_numpy(values[case_index(x)][:, 0:20:3].astype(np.float32)))
    assert "7 of 40 steps (the first 20, every 3)" in data["meta"]["notes"][0]
    assert bidmc(tmp_path, length="40")["test"][0].shape == (3, 40, 2)  # odelab reproduce --option gives text
    for options, message in (({"length": 41}, "length: expected at most 40"), ({"stride": 0}, "stride: expected an "
                             "integer >= 1"), ({"length": "ten"}, "length: expected an integer >= 1")):
        with pytest.raises(ValueError, match=message):
            bidmc(tmp_path, **options)


def test_standardised_targets_and_the_report_in_beats_per_minute(tmp_path):
    _, targets = write_pair(tmp_path)
    raw, z = bidmc(tmp_path), bidmc(tmp_path, standardise=True)
    train, valid, test = split_indices(20)
    mean, std = targets[train].mean(), targets[train].std(ddof=1)
    assert (raw["meta"]["offset"], raw["meta"]["scale"], raw["meta"]["standardised"]) == (0.0, 1.0, False)
    assert z["meta"]["offset"] == pytest.approx(mean) and z["meta"]["scale"] == pytest.approx(std)
    for split, rows in (("train", train), ("valid", valid), ("test", test)):
        assert torch.equal(z[split][0], raw[split][0])  # the inputs stay raw
        assert torch.allclose(z[split][1][:, 0].double(), torch.from_numpy((targets[rows] - mean) / std), atol=1e-6)
    assert f"targets standardised (training mean {mean:.4g}, std {std:.4g} beats per minute)" in z["meta"]["notes"][0]
    with pytest.raises(ValueError, match="standardise: expected True or False, got 'yes'"):
        bidmc(tmp_path, standardise="yes")
    prediction = raw["test"][1] + torch.tensor([[1.0], [-2.0], [2.0]])  # errors of 1, 2, 2 bpm: RMSE sqrt(3)
    report = bidmc_report(prediction, raw)
    assert report["test_rmse_original_units"] == pytest.approx(3 ** 0.5) and report["unit"] == "beats per minute"
    assert report["mean_predictor_rmse_original_units"] == pytest.approx(
        float(np.sqrt(np.mean((targets[test] - mean) ** 2))))
    same = bidmc_report((prediction - z["meta"]["offset"]) / z["meta"]["scale"], z)  # the same model, z-scored
    assert same["test_rmse_original_units"] == pytest.approx(3 ** 0.5, rel=1e-5)
    assert same["mean_predictor_rmse_original_units"] == pytest.approx(report["mean_predictor_rmse_original_units"])


def test_missing_files_are_named_with_the_folders_searched(tmp_path):
    with pytest.raises(ValueError, match="--data-root PATH"):
        bidmc(None)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        bidmc(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError) as error:
        bidmc(tmp_path, "rr")
    message = str(error.value)
    assert "missing BIDMC32RR_TRAIN.ts and BIDMC32RR_TEST.ts" in message and "never downloads" in message
    assert str(tmp_path / "BIDMC32RR") in message and str(tmp_path / "raw" / "BIDMC32RR") in message
    write_pair(tmp_path)
    (tmp_path / "BIDMC32HR_TEST.ts").unlink()
    with pytest.raises(FileNotFoundError, match="BIDMC32HR: missing BIDMC32HR_TEST.ts under"):
        bidmc(tmp_path)


def damaged(tmp_path, **write):
    """The training file with one change (default header: 9 lines, ``@data`` on line 10, case i on line 11 + i)."""
    values, targets = make_cases(12)
    path = tmp_path / "BIDMC32HR_TRAIN.ts"
    write_ts(path, values, targets, **write)
    te, te_y = make_cases(8, start=12)
    write_ts(tmp_path / "BIDMC32HR_TEST.ts", te, te_y)
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda i, row: row.rsplit(":", 1)[0] + ":fast" if i == 2 else row, "line 13, target: 'fast' is not a number"),
    (lambda i, row: row.rsplit(":", 1)[0] + ":?" if i == 2 else row, "line 13, target: '\\?' is not a number "
                                                                     "\\(a missing value: BIDMC32HR has none"),
    (lambda i, row: row.rsplit(":", 1)[0] + ":inf" if i == 0 else row, "line 11, target: a non-finite value"),
    (lambda i, row: row.rsplit(":", 1)[0] + ":" if i == 1 else row, "line 12: no target after the channels"),
    (lambda i, row: row.replace(",", ",?,", 1) if i == 3 else row, "line 14, channel 1: '\\?' is not a number"),
    (lambda i, row: row.replace(":", ",", 1) if i == 4 else row, "line 15: 1 channel\\(s\\) separated by ':', "
                                                                 "expected 2 and the target last"),
    (lambda i, row: ":".join(part.rsplit(",", 1)[0] for part in row.split(":")[:2]) + ":70" if i == 5 else row,
     "line 16, channel 1: 39 values, expected 40 \\(the header's @seriesLength\\)"),
])
def test_a_malformed_line_is_a_value_error_naming_the_file_and_line(tmp_path, edit, message):
    path = damaged(tmp_path, line=edit)
    with pytest.raises(ValueError, match=message) as error:
        bidmc(tmp_path)
    assert str(error.value).startswith(str(path))


def test_headers_and_lengths_are_checked(tmp_path):
    for head, message in ((["@classLabel true 1 2"], "line 1: '@classLabel true': a classification file; BIDMC32HR has "
                                                   "a numeric target"),
                          (["@targetLabel false"], "'@targetLabel false': the file has no targets"),
                          (["@dimensions 3"], "'@dimensions 3', expected 2 channels"),
                          (["@timeStamps true"], "time-stamped series are not supported")):
        damaged(tmp_path, head=head)
        with pytest.raises(ValueError, match=message):
            bidmc(tmp_path)
    damaged(tmp_path, head=["@problemName BIDMC32HR"])  # no declared length: the first case sets it; fine
    te, te_y = make_cases(8, steps=30, start=12)
    write_ts(tmp_path / "BIDMC32HR_TEST.ts", te, te_y)
    with pytest.raises(ValueError, match="BIDMC32HR_TEST.ts: series of 30 steps, .*BIDMC32HR_TRAIN.ts has 40"):
        bidmc(tmp_path)


def test_the_shared_reader_keeps_classification_and_regression_apart(tmp_path):
    values, targets = make_cases(3)
    write_ts(tmp_path / "BIDMC32HR_TRAIN.ts", values, targets)
    with pytest.raises(ValueError, match="line 9: '@targetLabel true': a regression file"):
        read_series_file(tmp_path / "BIDMC32HR_TRAIN.ts", "EigenWorms", 2, classes=5)
    with pytest.raises(ValueError, match="read from the archive's .ts files"):
        read_series_file(tmp_path / "BIDMC32HR_TRAIN.arff", "BIDMC32HR", 2)


def test_the_tasks_follow_the_papers():
    for target in ("hr", "rr", "spo2"):
        task = TASKS[f"bidmc-{target}"]
        assert settings(task, "paper", "lem") == dict(hidden_size=128, epochs=500, lr=1.56e-3, batch_size=32,
                                                      lr_milestones=(250,))
        assert settings(task, "quick", "unicornn")["hidden_size"] == 32
        assert task.target == "last" and task.loss == "mse" and task.plot == "scatter" and task.classes is None
        assert task.options == {"path": "data_root", "length": "length", "stride": "stride",
                                "standardise": "standardise"}
        assert task.report is bidmc_report
        assert task.baselines == {"mean predictor": mean_predictor_rmse}
        assert task.model_options("lem", {}) == {"dt": 0.19} and task.model_options("lstm", {}) == {}
        assert task.model_options("lem-official", {"stride": "4"}) == {"dt": 0.19 * 4}
    hr, rr = TASKS["bidmc-hr"].model_options, TASKS["bidmc-rr"].model_options
    assert hr("unicornn", {}) == {"dt": 4.6e-2, "alpha": 10.0, "num_layers": 3, "dropout": 0.1}
    assert rr("unicornn", {"stride": 2}) == {"dt": 1.1e-2 * 2, "alpha": 9.0, "num_layers": 3, "dropout": 0.1}
    assert TASKS["bidmc-spo2"].model_options("unicornn", {}) == rr("unicornn", {})


def test_cli_fit_bidmc_hr_on_tiny_files(tmp_path, capsys):
    write_pair(tmp_path / "tsr" / "BIDMC32HR")
    out = tmp_path / "run"
    argv = ["fit", "bidmc-hr", "--data-root", str(tmp_path / "tsr"), "--hidden", "3", "--epochs", "1", "--stride",
            "2", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "train (14, 20, 2), valid (3, 20, 2), test (3, 20, 2)" in printed and "split 14/3/3" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["model_options"] == {"dt": 0.19 * 2} and result["config"]["batch_size"] == 32
    assert result["test_sequences"] == 3 and result["data"]["unit"] == "beats per minute"
    targets = make_cases(20)[1]
    train, _, test = split_indices(20)
    mean = np.float32(targets[train].astype(np.float32).mean())  # the RMSE of the mean training target, in bpm
    expected = np.sqrt(np.mean((targets[test].astype(np.float32) - mean) ** 2))
    assert result["baselines"]["mean predictor"] == pytest.approx(float(expected), rel=1e-5)
    assert (out / "predictions.png").is_file()


def test_cli_fit_with_standardised_targets_reports_beats_per_minute(tmp_path, capsys):
    write_pair(tmp_path)
    out = tmp_path / "run"
    argv = ["fit", "bidmc-hr", "--data-root", str(tmp_path), "--standardise", "--model", "gru", "--hidden", "3",
            "--epochs", "1", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert "targets standardised (training mean" in capsys.readouterr().out
    result = json.loads((out / "results.json").read_text())
    scale = result["data"]["scale"]
    assert result["settings"]["standardise"] is True and scale > 1
    assert result["test_rmse_original_units"] == pytest.approx(result["test_rmse"] * scale, rel=1e-5)
    assert result["mean_predictor_rmse_original_units"] == pytest.approx(result["baselines"]["mean predictor"] * scale,
                                                                         rel=1e-5)


def test_cli_standardise_is_refused_for_other_tasks(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["fit", "fhn", "--standardise"])
    assert exit.value.code == 2
    assert "--standardise: only for the task(s) bidmc-hr, bidmc-rr, bidmc-spo2" in capsys.readouterr().err


def test_cli_missing_files_are_one_line_naming_them(tmp_path, capsys):
    argv = ["fit", "bidmc-rr", "--data-root", str(tmp_path), "--no-progress", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "BIDMC32RR_TRAIN.ts and BIDMC32RR_TEST.ts" in line and "never downloads" in line
