"""EigenWorms (Rusch et al. 2022, LEM, §3.3, Table 2) from the UEA archive's files the user already has on disk
(``odelab fit eigenworms --data-root PATH``); nothing is ever downloaded.

* Data: 259 sequences of 17 984 steps of 6 channels (eigenworm coefficients of C. elegans' posture), 5 classes
  (wild type and four mutants): 128 cases in the UEA training file and 131 in its test file.
* Files: ``EigenWorms_TRAIN.ts`` and ``EigenWorms_TEST.ts`` (the sktime / UEA text format), else the pair
  ``EigenWorms_TRAIN.arff`` / ``EigenWorms_TEST.arff`` (Weka's relational attribute format, which the official code
  reads with sktime), looked up in ``PATH``, ``PATH/EigenWorms`` (the archive's zip unpacked into it) and
  ``PATH/raw`` (the official code's ``data/eigenworms/raw``); a pair is never mixed across formats. Both files of the
  archive list the same cases in the same order (assumed: the official split is drawn over the ``.arff`` order).
  - ``.ts``: header lines starting with ``@`` (``@dimensions 6``, ``@seriesLength``, ``@classLabel true 1 2 3 4 5``
    … are checked where present; ``@timeStamps true`` is refused), comments ``#``, then after ``@data`` one case
    per line: the channels separated by ``:``, the values of a channel by ``,``, the class label last.
  - ``.arff``: ``@attribute NAME relational`` … ``@end NAME`` (one numeric attribute per step), the class attribute
    ``@attribute target {1,2,3,4,5}``, comments ``%``, then after ``@data`` one case per line: the channels in one
    quoted string, separated by a literal ``\\n`` (backslash, n), then ``,`` and the class label.
  Every case must have 6 channels of the same length in both files; values must be finite numbers (a missing
  value ``?`` is an error: EigenWorms has none and odelab fills no gaps); a label must be one the header declares
  (or, without a declaration, one of at most 5). Errors are a ValueError naming the file and the line.
* Classes: the labels as text, sorted (sklearn's ``LabelEncoder`` fitted on the training labels, as the official
  code: "1" … "5" -> 0 … 4), taken from the header's declaration where there is one.
* Split, the official code's (``src/eigenWorms/data.py``): the training cases then the test cases merged (259), then
  ``sklearn.model_selection.train_test_split(test_size=0.3, random_state=1234)`` (no stratification) and the
  held-out part split 50/50 by the same call with the same seed, its first part validating: 181 / 39 / 39.
  ``train_test_split`` (sklearn ≥ 0.18, up to 1.9 read) takes n_test = ⌈test_size · n⌉, draws
  ``perm = np.random.RandomState(seed).permutation(n)`` (``ShuffleSplit``) and returns ``perm[n_test:]`` as the
  first part and ``perm[:n_test]`` as the second, in that order; done here with numpy alone
  (:func:`split_indices`; RandomState's stream is frozen by numpy). The split is the same for every run seed
  (the paper's 5 re-trainings share it); the run's seed draws the initialisation and the batches only.
* Inputs: the raw values (no normalisation, as the official code), float32 (n, 17 984, 6); targets int64 (n,),
  read at the last step. Options for short runs: ``length`` keeps the first N steps of every sequence, then
  ``stride`` every K-th of them (steps 0, K, 2K, …: ⌈N / K⌉ steps; the eigenworms task multiplies LEM's and
  UnICORNN's Δt by K, so that a step still spans K samples' time).

Reading the two ``.ts`` files (≈ 28 million numbers, ≈ 260 MB of text) takes about 10 s: not cached.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from .local import local_root
from .ts_files import count_option as _count, read_series_file

CASES = 259  # 128 training + 131 test cases in the UEA files
SERIES_LENGTH = 17984
CHANNELS = 6
CLASSES = 5
SPLIT_SEED = 1234  # the official data.py's rnd_state
HELD_OUT = 0.3  # test_size of the first train_test_split; the held-out part is then halved
STEMS = {"train": "EigenWorms_TRAIN", "test": "EigenWorms_TEST"}
FORMATS = (".ts", ".arff")  # looked for in this order


def find_files(root: str | Path | None) -> dict[str, Path]:
    """The training and test file (``.ts`` pair before ``.arff`` pair) in ``root``, ``root/EigenWorms`` or
    ``root/raw``; FileNotFoundError naming every expected file and the folders searched."""
    root = local_root(root, "the eigenworms task reads the UEA files")
    folders = [root, root / "EigenWorms", root / "raw"]
    missing = []
    for ext in FORMATS:
        found = {key: next((folder / (stem + ext) for folder in folders if (folder / (stem + ext)).is_file()), None)
                 for key, stem in STEMS.items()}
        if all(found.values()):
            return found
        missing.append(" and ".join(stem + ext for key, stem in STEMS.items() if found[key] is None))
    raise FileNotFoundError(
        f"EigenWorms: missing {missing[0]} (or, for the .arff pair, {missing[1]}) under --data-root {str(root)!r} "
        f"(searched {', '.join(map(str, folders))}); odelab never downloads -- unpack the UEA archive's "
        f"EigenWorms.zip (timeseriesclassification.com) there")


def read_file(path: str | Path) -> tuple[np.ndarray, list[str], tuple[str, ...] | None]:
    """(series (n, steps, 6) float32, the class label of each case as written, the labels the header declares or
    None) of one UEA ``.ts`` or ``.arff`` file (by its suffix), checked (odelab/data/ts_files.py); ValueError naming
    the file and line."""
    return tuple(read_series_file(path, "EigenWorms", CHANNELS, CLASSES))


def split_sizes(count: int) -> tuple[int, int, int]:
    """(training, validation, test) cases of ``count`` merged ones: 181 / 39 / 39 of 259 (sklearn's n_test =
    ⌈test_size · n⌉, twice)."""
    held = math.ceil(HELD_OUT * count)
    test = math.ceil(0.5 * held)
    if count - held < 1 or held - test < 1:
        raise ValueError(f"EigenWorms: {count} cases, too few for a 70 / 15 / 15 split")
    return count - held, held - test, test


def split_indices(count: int, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(training, validation, test) indices into the ``count`` merged cases, in the order the official code lists
    them: ``train, held = train_test_split(test_size=0.3, random_state=seed)`` then ``valid, test =
    train_test_split(held, test_size=0.5, random_state=seed)``, each call = ``perm[n_test:]``, ``perm[:n_test]`` of
    ``perm = np.random.RandomState(seed).permutation(n)``."""
    _, _, n_test = split_sizes(count)
    perm = np.random.RandomState(seed).permutation(count)
    n_held = math.ceil(HELD_OUT * count)
    train, held = perm[n_held:], perm[:n_held]
    inner = np.random.RandomState(seed).permutation(n_held)
    return train, held[inner[n_test:]], held[inner[:n_test]]


def eigenworms(path: str | Path | None, length: int | str | None = None, stride: int | str = 1) -> dict:
    """EigenWorms from the UEA files under ``path`` (see the module docstring): ``{"train"|"valid"|"test": (inputs
    (n, steps, 6) float32, targets (n,) int64), "meta": {...}}``, 181 / 39 / 39 cases; ``length`` keeps the first
    N steps, ``stride`` every K-th of them."""
    length = None if length is None else _count("length", length, 1)
    stride = _count("stride", stride, 1)
    files = find_files(path)
    train_x, train_labels, train_declared = read_file(files["train"])
    test_x, test_labels, test_declared = read_file(files["test"])
    if test_x.shape[1] != train_x.shape[1]:
        raise ValueError(f"{files['test']}: series of {test_x.shape[1]} steps, {files['train']} has "
                         f"{train_x.shape[1]}; the series must all have one length")
    if train_declared and test_declared and sorted(train_declared) != sorted(test_declared):
        raise ValueError(f"{files['test']}: declares the class labels {', '.join(test_declared)}, "
                         f"{files['train']} {', '.join(train_declared)}")
    names = sorted(train_declared or test_declared or set(train_labels) | set(test_labels))
    if len(names) > CLASSES:
        raise ValueError(f"{files['test']}: class labels {', '.join(names)} in the two files, more than EigenWorms' "
                         f"{CLASSES}")
    index = {name: i for i, name in enumerate(names)}
    for key, labels in (("train", train_labels), ("test", test_labels)):
        for case, label in enumerate(labels, 1):
            if label not in index:
                raise ValueError(f"{files[key]}: case {case} has the class label {label!r}, not one of "
                                 f"{', '.join(names)} (declared in {files['train' if train_declared else 'test']})")
    inputs = np.concatenate([train_x, test_x])
    targets = np.array([index[label] for label in train_labels + test_labels], dtype=np.int64)
    steps = inputs.shape[1]
    length = steps if length is None else length
    if length > steps:
        raise ValueError(f"length: expected at most {steps} (the files' series length), got {length}")
    if length < steps or stride > 1:
        inputs = np.ascontiguousarray(inputs[:, :length:stride])
    split = dict(zip(("train", "valid", "test"), split_indices(len(inputs))))
    data = {key: (torch.from_numpy(inputs[rows]), torch.from_numpy(targets[rows])) for key, rows in split.items()}
    note = (f"EigenWorms: {len(train_labels)} + {len(test_labels)} cases merged, split "
            f"{'/'.join(str(len(rows)) for rows in split.values())} (train_test_split's rule, seed {SPLIT_SEED}, "
            f"the same for every run seed); {inputs.shape[1]} of {steps} steps"
            + (f" (the first {length}, every {stride})" if length < steps or stride > 1 else "") + ", not normalised")
    data["meta"] = {"files": {key: str(file) for key, file in files.items()}, "format": files["train"].suffix[1:],
                    "classes": names, "series_length": steps, "steps": int(inputs.shape[1]), "notes": [note]}
    if len(targets) != CASES or steps != SERIES_LENGTH:
        data["meta"]["warnings"] = [f"EigenWorms: {len(targets)} cases of {steps} steps; the UEA files hold {CASES} "
                                    f"of {SERIES_LENGTH}"]
    return data


def eigenworms_models(model: str, options: dict) -> dict:
    """Per-model keywords on EigenWorms: LEM Δt 1.6e-3 (Rusch et al. 2022, Table 8); UnICORNN 2 layers, Δt (2.81e-5,
    3.43e-2), α 0 (Rusch 2023, Table 3.8 and the official code); each Δt times the task's ``stride``. coRNN: no
    published EigenWorms setting, its defaults."""
    stride = _count("stride", options.get("stride", 1), 1)
    if model in ("lem", "lem-official"):
        return {"dt": 1.6e-3 * stride}
    if model == "unicornn":
        return {"dt": [2.81e-5 * stride, 3.43e-2 * stride], "alpha": 0.0, "num_layers": 2}
    return {}
