"""HAR-2 (Erichson et al. 2025, τ-GRU, §5, Table 1; Kusupati et al. 2018's binary version of UCI HAR) from the
"UCI HAR Dataset" folder the user already has on disk (``odelab fit har2 --data-root PATH``); nothing is ever
downloaded.

* Data: UCI HAR (Anguita et al. 2012): windows of 128 steps (2.56 s at 50 Hz) of a waist-worn smartphone's
  accelerometer and gyroscope, 30 volunteers, 6 activities; 7 352 training and 2 947 test windows.
* Files, the archive's layout, looked up in ``PATH`` and ``PATH/UCI HAR Dataset`` (the zip unpacked into PATH):
  ``train/Inertial Signals/{CHANNEL}_train.txt`` and ``test/Inertial Signals/{CHANNEL}_test.txt`` for the 9
  channels below, one window per line (128 numbers separated by spaces), and the activities ``train/y_train.txt``,
  ``test/y_test.txt`` (one integer 1 … 6 per line). A missing file is a FileNotFoundError naming it and the folders
  searched; a line of another length, a value that is not a finite number, a label outside 1 … 6 or files of
  different row counts are a ValueError naming the file (and the line).
* Channels (the inputs' feature order), the 9 raw inertial signals in the order of the FastGRNN / EdgeML HAR
  preprocessing (``INPUT_SIGNAL_TYPES`` of EdgeML's HAR helper, after Chevalier's LSTM-HAR): body_acc x, y, z,
  body_gyro x, y, z, total_acc x, y, z. The coRNN repository (whose HAR-2 row the τ-GRU paper quotes) ships no
  preprocessing: its ``har2_task.py`` loads ready-made ``trainx`` / ``evalx`` / ``testx`` arrays of 9 features.
* Normalisation, as EdgeML's helper: each channel minus its mean, divided by its standard deviation, both over
  every step of the training part (after the validation windows are taken out), applied to all three parts.
* Classes (Kusupati et al. 2018, App.: the 6 activities merged into two): class 0 = {WALKING_UPSTAIRS (2), SITTING
  (4), LAYING (6)}, class 1 = {WALKING (1), WALKING_DOWNSTAIRS (3), STANDING (5)} (their grouping as written in the
  FastGRNN paper's appendix, recalled, not checked against its preprocessing code, which is not in the coRNN
  repository; which group is 0 does not change an accuracy). Targets int64 (n,), read at the last step.
* Split: 7 352 training windows minus 900 validating, 2 947 test (the τ-GRU paper's 7 352 / 900 / 2 947 sum to more
  than UCI HAR's 10 299 windows, so the 900 are carved from the training file; how is not published, EdgeML's
  helper holds out whole subjects, 10 %, which does not give 900). Here: ``np.random.RandomState(1234)
  .permutation(n)``, its first round(900 / 7352 · n) windows validating (900 of the real 7 352), the rest training,
  each kept in file order; the same for every run seed (the seeds vary the initialisation and the batches).

Reading the 20 text files (≈ 11.8 million numbers) takes a few seconds: not cached.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .local import finite_numbers, local_root

CHANNELS = ("body_acc_x", "body_acc_y", "body_acc_z", "body_gyro_x", "body_gyro_y", "body_gyro_z",
            "total_acc_x", "total_acc_y", "total_acc_z")
STEPS = 128
ACTIVITIES = ("WALKING", "WALKING_UPSTAIRS", "WALKING_DOWNSTAIRS", "SITTING", "STANDING", "LAYING")  # labels 1 … 6
GROUPS = ((2, 4, 6), (1, 3, 5))  # class 0, class 1: the activities (1-based) each merges (Kusupati et al. 2018)
CLASS_NAMES = ("upstairs/sitting/laying", "walking/downstairs/standing")
TRAIN, VALID, TEST = 7352 - 900, 900, 2947  # the paper's sizes (validation carved from UCI's 7 352 training windows)
SPLIT_SEED = 1234
FOLDER = "UCI HAR Dataset"


def relative_files(part: str) -> list[str]:
    """The 9 signal files then the label file of ``part`` ("train" or "test"), relative to the dataset folder."""
    return [f"{part}/Inertial Signals/{channel}_{part}.txt" for channel in CHANNELS] + [f"{part}/y_{part}.txt"]


def find_dataset(root: str | Path | None) -> Path:
    """The dataset folder (``root`` or ``root/UCI HAR Dataset``) holding every file; FileNotFoundError naming the
    first missing file and the folders searched."""
    root = local_root(root, "the har2 task reads the UCI HAR Dataset files")
    folders = [root, root / FOLDER]
    wanted = relative_files("train") + relative_files("test")
    missing = {folder: [name for name in wanted if not (folder / name).is_file()] for folder in folders}
    for folder in folders:
        if not missing[folder]:
            return folder
    closest = min(folders, key=lambda folder: len(missing[folder]))
    names = missing[closest]
    more = f" and {len(names) - 1} other file(s)" if len(names) > 1 else ""
    raise FileNotFoundError(
        f"HAR-2: missing {names[0]!r}{more} under --data-root {str(root)!r} (searched {', '.join(map(str, folders))}); "
        f"odelab never downloads -- unpack UCI's 'UCI HAR Dataset.zip' (Human Activity Recognition Using "
        f"Smartphones) there")


def read_signal(path: str | Path) -> np.ndarray:
    """One ``Inertial Signals`` file: (windows, 128) float64; ValueError naming the file and line."""
    path = Path(path)
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            tokens = line.split()
            if not tokens:
                continue
            if len(tokens) != STEPS:
                raise ValueError(f"{path}, line {number}: {len(tokens)} values, expected {STEPS} (one window of "
                                 f"{STEPS} steps per line)")
            rows.append(finite_numbers(tokens, f"{path}, line {number}"))
    if not rows:
        raise ValueError(f"{path}: no window")
    return np.stack(rows)


def read_labels(path: str | Path) -> np.ndarray:
    """One ``y_*.txt`` file: the activities 1 … 6 as int64 (windows,); ValueError naming the file and line."""
    path = Path(path)
    labels = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            text = line.strip()
            if not text:
                continue
            if not text.isdigit() or not 1 <= int(text) <= len(ACTIVITIES):
                raise ValueError(f"{path}, line {number}: activity {text[:30]!r}, expected an integer 1 … "
                                 f"{len(ACTIVITIES)}")
            labels.append(int(text))
    if not labels:
        raise ValueError(f"{path}: no label")
    return np.array(labels, dtype=np.int64)


def read_part(folder: str | Path, part: str) -> tuple[np.ndarray, np.ndarray]:
    """(inputs (n, 128, 9) float64 in :data:`CHANNELS` order, activities (n,) 1 … 6) of ``part``; ValueError when
    the files' row counts differ."""
    folder = Path(folder)
    *signals, labels = relative_files(part)
    columns = [read_signal(folder / name) for name in signals]
    activities = read_labels(folder / labels)
    for name, column in zip(signals, columns):
        if len(column) != len(activities):
            raise ValueError(f"{folder / name}: {len(column)} windows, {folder / labels} has {len(activities)} "
                             f"labels; the files of a part must have one row per window")
    return np.stack(columns, axis=2), activities


def two_classes(activities: np.ndarray) -> np.ndarray:
    """HAR-2's class (0 or 1, :data:`GROUPS`) of each activity 1 … 6."""
    table = np.zeros(len(ACTIVITIES) + 1, dtype=np.int64)
    for cls, group in enumerate(GROUPS):
        table[list(group)] = cls
    return table[activities]


def split_indices(count: int, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) rows of the ``count`` training-file windows, each in file order: the first
    round(900 / 7352 · count) of ``RandomState(seed).permutation(count)`` validate (900 of 7 352)."""
    valid = round(VALID * count / (TRAIN + VALID))
    if valid < 1 or count - valid < 1:
        raise ValueError(f"HAR-2: {count} training windows, too few to carve a validation set from")
    perm = np.random.RandomState(seed).permutation(count)
    return np.sort(perm[valid:]), np.sort(perm[:valid])


def har2(path: str | Path | None) -> dict:
    """HAR-2 from the UCI HAR Dataset under ``path`` (see the module docstring): ``{"train"|"valid"|"test": (inputs
    (n, 128, 9) float32, targets (n,) int64), "meta": {...}}``, 6 452 / 900 / 2 947 windows."""
    folder = find_dataset(path)
    train_x, train_activity = read_part(folder, "train")
    test_x, test_activity = read_part(folder, "test")
    rows = dict(zip(("train", "valid"), split_indices(len(train_x))))
    fit = train_x[rows["train"]].reshape(-1, len(CHANNELS))
    mean, std = fit.mean(0), fit.std(0)
    std = np.where(std > 0, std, 1.0)  # a constant channel (only in tiny files) is centred, not scaled
    parts = {"train": (train_x[rows["train"]], train_activity[rows["train"]]),
             "valid": (train_x[rows["valid"]], train_activity[rows["valid"]]), "test": (test_x, test_activity)}
    data = {key: (torch.from_numpy(((x - mean) / std).astype(np.float32)), torch.from_numpy(two_classes(y)))
            for key, (x, y) in parts.items()}
    sizes = "/".join(str(len(parts[key][1])) for key in ("train", "valid", "test"))
    note = (f"HAR-2: UCI HAR's {len(train_x)} training windows split {len(rows['train'])}/{len(rows['valid'])} "
            f"(RandomState({SPLIT_SEED}), the same for every run seed), {len(test_x)} test: split {sizes}; 9 raw "
            "inertial channels standardised with the training part's mean and std; classes "
            f"{CLASS_NAMES[0]} (0) vs {CLASS_NAMES[1]} (1)")
    data["meta"] = {"folder": str(folder), "channels": list(CHANNELS), "classes": list(CLASS_NAMES),
                    "mean": mean.tolist(), "std": std.tolist(), "notes": [note]}
    if (len(rows["train"]), len(rows["valid"]), len(test_x)) != (TRAIN, VALID, TEST):
        data["meta"]["warnings"] = [f"HAR-2: split {sizes}; the UCI HAR files give {TRAIN}/{VALID}/{TEST}"]
    return data
