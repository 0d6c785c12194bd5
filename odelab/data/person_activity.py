"""Person Activity, irregularly sampled (Farsang et al. 2024, LRC, §4.2, App. A.3.2, Tables 1 and 5), from UCI's
"Localization Data for Person Activity" file the user already has on disk (``odelab fit person-activity --data-root
PATH``); nothing is ever downloaded. The recipe is the ODE-LSTM loader's (Lechner & Hasani 2020,
``mlech26l/ode-lstms``, ``irregular_sampled_datasets.py``, class ``PersonData``), which the LRC code
(``MoniFarsang/LRC``, ``classification/irregular_sampled_datasets.py``, ``run_person_activity.py``) reuses unchanged.

* File: ``ConfLongDemo_JSI.txt`` (Vidulin et al. 2010; UCI data set 196), looked up in ``PATH``, then ``PATH/person``
  (the downloaders' ``data/person/``), then every other folder directly in ``PATH`` (sorted by name); ``PATH`` may
  also be the file itself. One sample per line, no header, 8 comma-separated fields: the sequence name (``A01`` …
  ``E05``: person A … E, recording 01 … 05), the tag (sensor) id, the timestamp (.NET ticks: integer units of
  100 ns), the date as text (not read), the tag's coordinates x, y, z, the activity. Empty lines are skipped;
  any other line without those 8 fields, with an unknown tag or activity, a non-integer timestamp, a coordinate that
  is not a finite number, or a timestamp earlier than the previous sample's of its recording is a ValueError naming
  the file and the line.
* Inputs (7 features, as ``PersonData``): the tag as a one-hot vector of 4, in the loader's order ``010-000-024-033``
  (left ankle), ``010-000-030-096`` (right ankle), ``020-000-033-111`` (chest), ``020-000-032-221`` (belt), then x,
  y, z raw (no normalisation); and, as the last (8th) feature, the sample's time gap (``Task.time_gaps``).
* Classes: the 11 activities merged into 7 (the loader's ``class_map``): lying down, lying -> 0; sitting down,
  sitting -> 1; standing up from lying, standing up from sitting, standing up from sitting on the ground -> 2;
  walking -> 3; falling -> 4; on all fours -> 5; sitting on the ground -> 6. A class at every step.
* Time gaps. Sample n of a recording lasts t_n − t_{n−1}: odelab's hold convention (sample n drives the step that
  ends at its own time t_n), which is what the loader's time feature already is: the elapsed time since the
  previous sample of the same recording, which the LRC cell takes as the Euler step Δt of the step that reads the
  sample (``LRC_Cell.call``: ``inputs, elapsed_time = inputs``) and LSTM/GRU/MGU concatenate to their input. Units:
  100 ms -> 1.0, i.e. Δticks / 10⁶ (the loader's chain ``ticks / 10⁵`` ("millis", in fact units of 10 ms), the
  difference ``/ 1000`` ("seconds"), ``· 1000 / 10``, the same number; ours from the integer ticks, exact, where the
  loader's float64 arithmetic rounds the ticks (≈ 6.3·10¹⁷, 128 ticks apart in float64) and errs by up to
  ~2·10⁻⁴, i.e. 20 µs). The first sample of each recording has no predecessor: 5.0 (the loader's constant 0.05
  "seconds" = 500 ms). A window cut from inside a recording keeps its first sample's real gap (to the sample before
  the window), as the loader's slices of the per-recording gaps do.
* Recordings: a new one starts wherever the sequence name changes (the loader's ``arr[0] != current_person``), so
  there are 25 (A01 … E05), not 5 persons. The loader appends a recording only when the next one starts, so the
  file's last recording never enters its data; kept here (``last_recording=False``) so that the windows and
  the split below are the paper's; ``last_recording=True`` adds it (its windows then change the split).
* Windows: 32 samples with stride 16 from each recording, starts s = 0, 16, … while s < n − 32 (the loader's
  ``range(0, n - seq_len, seq_len // 2)``: the window ending exactly at the recording's end is not cut; a
  recording of ≤ 32 samples gives none), recordings in file order.
* Split: the loader's, ``perm = np.random.RandomState(98841).permutation(N)`` over all N windows, its first
  ⌊0.2 N⌋ windows test and the rest train, the same for every run seed. The loader has no validation set (the LRC
  code passes the test windows as Keras' ``validation_data``, for its logs only, and reports the test accuracy
  after the last of its epochs); odelab keeps the epoch of best validation accuracy, so ours carves a validation
  set out of the training windows: ``torch.randperm`` of a generator seeded with the run's ``seed`` over the
  training windows (in the loader's order), its first ``valid_size`` (default a tenth, ⌊n / 10⌋, at least 1)
  validate and the others train, in the loader's order. Windows overlap by 16 samples, so a validation or test
  window shares half its samples with training windows (as the loader's test windows do).

The splits are float32 inputs (n, 32, 8) and int64 targets (n, 32). Reading the file (164 860 lines, 21 MB) takes
about a second: not cached; ``meta`` has the file, its sha256 and the counts.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .local import local_root

FILE = "ConfLongDemo_JSI.txt"
SUBFOLDER = "person"  # the downloaders' data/person/
FIELDS = ("sequence name", "tag id", "timestamp", "date", "x", "y", "z", "activity")
TAGS = ("010-000-024-033", "010-000-030-096", "020-000-033-111", "020-000-032-221")  # one-hot order (PersonData)
TAG_NAMES = ("ankle left", "ankle right", "chest", "belt")
ACTIVITIES = {"lying down": 0, "lying": 0, "sitting down": 1, "sitting": 1, "standing up from lying": 2,
              "standing up from sitting": 2, "standing up from sitting on the ground": 2, "walking": 3,
              "falling": 4, "on all fours": 5, "sitting on the ground": 6}  # 11 activities -> 7 classes
CLASS_NAMES = ("lying", "sitting", "standing up", "walking", "falling", "on all fours", "sitting on the ground")
CLASSES = 7
FEATURES = len(TAGS) + 3  # one-hot tag + x, y, z; the time gap comes after them
TICKS_PER_UNIT = 10 ** 6  # .NET ticks of 100 ns: 100 ms -> 1.0
FIRST_GAP = 5.0  # the first sample of a recording (the loader's 0.05 "seconds" = 500 ms)
WINDOW, STRIDE = 32, 16
SPLIT_SEED = 98841  # the loader's RandomState
TEST_FRACTION = 0.2
VALID_FRACTION = 10  # a tenth of the training windows validate (ours: the loader has no validation set)


def find_file(root: str | Path | None) -> Path:
    """``ConfLongDemo_JSI.txt`` in ``root``, ``root/person`` or another folder directly in ``root`` (or ``root``
    itself when it is that file); FileNotFoundError naming the file and the folders searched."""
    if root is not None and Path(root).expanduser().is_file() and Path(root).name == FILE:
        return Path(root).expanduser()
    root = local_root(root, f"the person-activity task reads {FILE}")
    others = sorted((p for p in root.iterdir() if p.is_dir() and p.name != SUBFOLDER), key=lambda p: p.name)
    folders = [root, root / SUBFOLDER] + others
    for folder in folders:
        if (folder / FILE).is_file():
            return folder / FILE
    raise FileNotFoundError(
        f"Person Activity: no {FILE} under --data-root {str(root)!r} (searched {root}, {root / SUBFOLDER} and the "
        f"{len(others)} other folder(s) directly in it); odelab never downloads -- copy UCI's 'Localization Data for "
        f"Person Activity' file there")


def _fail(path: Path, number: int, message: str) -> ValueError:
    return ValueError(f"{path}, line {number}: {message}")


def read_recordings(path: str | Path, last_recording: bool = False) -> list[dict]:
    """The recordings of the file ``path`` in file order, each ``{"name", "first_line", "features" (n, 7) float32,
    "gaps" (n,) float64, "labels" (n,) int64}`` (module docstring); the file's last recording only with
    ``last_recording`` (the loader drops it). ValueError naming the file and the line of a malformed line."""
    path = Path(path)
    recordings, rows = [], None
    name = previous = None
    with open(path, encoding="utf-8", newline=None) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            fields = [f.strip() for f in line.rstrip("\n").split(",")]
            if len(fields) != len(FIELDS):
                raise _fail(path, number, f"{len(fields)} comma-separated field(s), expected {len(FIELDS)} "
                                          f"({', '.join(FIELDS)}): {line.strip()[:80]!r}")
            sequence, tag, stamp, _, *xyz, activity = fields
            if tag not in TAGS:
                raise _fail(path, number, f"unknown tag id {tag!r}, expected one of {', '.join(TAGS)}")
            if activity not in ACTIVITIES:
                raise _fail(path, number, f"unknown activity {activity!r}, expected one of "
                                          f"{', '.join(map(repr, ACTIVITIES))}")
            try:
                ticks = int(stamp)
            except ValueError:
                raise _fail(path, number, f"timestamp {stamp!r}: expected an integer (.NET ticks of 100 ns)") from None
            try:
                coordinates = [float(v) for v in xyz]
            except ValueError:
                raise _fail(path, number, f"coordinates {', '.join(xyz)}: expected three numbers") from None
            if not all(map(math.isfinite, coordinates)):
                raise _fail(path, number, f"coordinates {', '.join(xyz)}: expected finite numbers")
            if sequence != name:
                if rows is not None:
                    recordings.append(rows)
                rows = {"name": sequence, "first_line": number, "tags": [], "xyz": [], "gaps": [], "labels": []}
                name, gap = sequence, FIRST_GAP
            else:
                if ticks < previous:
                    raise _fail(path, number, f"timestamp {ticks} is earlier than the previous sample's ({previous}) "
                                              f"of recording {sequence}; expected the samples in time order")
                gap = (ticks - previous) / TICKS_PER_UNIT
            previous = ticks
            rows["tags"].append(TAGS.index(tag))
            rows["xyz"].append(coordinates)
            rows["gaps"].append(gap)
            rows["labels"].append(ACTIVITIES[activity])
    if rows is not None and last_recording:
        recordings.append(rows)
    out = []
    for rows in recordings:
        n = len(rows["labels"])
        features = np.zeros((n, FEATURES), dtype=np.float32)
        features[np.arange(n), rows["tags"]] = 1.0
        features[:, len(TAGS):] = np.asarray(rows["xyz"], dtype=np.float64)
        out.append({"name": rows["name"], "first_line": rows["first_line"], "features": features,
                    "gaps": np.asarray(rows["gaps"], dtype=np.float64),
                    "labels": np.asarray(rows["labels"], dtype=np.int64)})
    return out


def window_starts(length: int, window: int = WINDOW, stride: int = STRIDE) -> range:
    """The loader's window starts in a recording of ``length`` samples: 0, stride, … while < length − window."""
    return range(0, length - window, stride)


def cut_windows(recordings: list[dict], window: int = WINDOW, stride: int = STRIDE) -> tuple[Tensor, Tensor]:
    """Every recording's windows, recordings in order: inputs (N, window, 7 + 1) float32 (the features, then each
    sample's time gap) and per-step classes (N, window) int64."""
    inputs, targets = [], []
    for rec in recordings:
        series = np.concatenate([rec["features"], rec["gaps"][:, None].astype(np.float32)], 1)
        for s in window_starts(len(series), window, stride):
            inputs.append(series[s:s + window])
            targets.append(rec["labels"][s:s + window])
    if not inputs:
        raise ValueError(f"Person Activity: no recording has more than {window} samples, so no window of {window}")
    return torch.from_numpy(np.stack(inputs)), torch.from_numpy(np.stack(targets))


def split_indices(count: int, seed: int, valid_size: int | None = None) -> dict[str, np.ndarray]:
    """Window indices of the splits: test = the loader's first ⌊0.2 count⌋ of ``RandomState(98841).permutation``,
    train = the rest in that order, less ``valid_size`` of them (default a tenth, at least 1) drawn with ``seed`` to
    validate (module docstring)."""
    test_size = int(TEST_FRACTION * count)
    if test_size < 1 or count - test_size < 2:
        raise ValueError(f"Person Activity: {count} window(s) of {WINDOW} samples; expected at least 5 (one to test, "
                         f"two to train and validate)")
    permutation = np.random.RandomState(SPLIT_SEED).permutation(count)
    test, train = permutation[:test_size], permutation[test_size:]
    valid = max(1, len(train) // VALID_FRACTION) if valid_size is None else valid_size
    if not isinstance(valid, int) or isinstance(valid, bool) or not 1 <= valid < len(train):
        raise ValueError(f"valid_size: expected an integer in 1 … {len(train) - 1} (the {len(train)} training "
                         f"windows of {count}), got {valid!r}")
    chosen = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))[:valid].numpy()
    keep = np.ones(len(train), dtype=bool)
    keep[chosen] = False
    return {"train": train[keep], "valid": train[np.sort(chosen)], "test": test}


def person_activity(path: str | Path | None, seed: int = 1234, valid_size: int | None = None,
                    last_recording: bool = False) -> dict:
    """Person Activity from ``ConfLongDemo_JSI.txt`` under ``path`` (module docstring): ``{"train"|"valid"|"test":
    (inputs (n, 32, 8) float32 whose last feature is each sample's time gap, targets (n, 32) int64), "meta": {...}}``;
    the test windows are the loader's for every ``seed``, which draws the validation windows."""
    file = find_file(path)
    recordings = read_recordings(file, last_recording=last_recording)
    if not recordings:
        raise ValueError(f"{file}: no recording" + ("" if last_recording else " before the last one (the loader "
                                                                               "drops the file's last recording)"))
    inputs, targets = cut_windows(recordings)
    index = split_indices(len(inputs), seed, valid_size)
    data = {split: (inputs[torch.from_numpy(i)], targets[torch.from_numpy(i)]) for split, i in index.items()}
    with open(file, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    data["meta"] = {"file": str(file), "sha256": digest, "recordings": [r["name"] for r in recordings],
                    "samples": sum(len(r["labels"]) for r in recordings), "windows": len(inputs),
                    "last_recording": last_recording}
    return data


def majority_class_accuracy(data: dict) -> float:
    """Test accuracy of naming the most frequent training class (over every step) at every step."""
    majority = torch.bincount(data["train"][1].reshape(-1), minlength=CLASSES).argmax()
    return float((data["test"][1] == majority).float().mean())
