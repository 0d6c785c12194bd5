"""Reader of the time-series archives' text files: the sktime / UEA ``.ts`` format of the UEA & UCR classification
and Monash / UEA / UCR extrinsic-regression archives (Tan et al. 2020), and Weka's ``.arff`` of the UEA classification
archive; one file -> (series (n, steps, channels) float32, the label or target of each case, the class labels its
header declares or None). Used by odelab/data/eigenworms.py (classification) and odelab/data/bidmc.py (regression),
with the options both take for short runs (:func:`keep_steps`: the first ``length`` steps, then every ``stride``-th).

* ``.ts``: header lines starting with ``@`` before ``@data`` (``@dimensions C`` and ``@seriesLength`` are checked
  where present; ``@timeStamps true`` is refused; a classification file declares ``@classLabel true L1 L2 …``, a
  regression file ``@targetLabel true``), comments ``#``, then one case per line: the channels separated by ``:``, the
  values of a channel by ``,``, the class label (or the numeric target: a float) after the last ``:``.
* ``.arff`` (classification only): ``@attribute NAME relational`` … ``@end NAME`` (one numeric attribute per step),
  the class attribute ``@attribute target {1,2,…}``, comments ``%``, then after ``@data`` one case per line: the
  channels in one quoted string, separated by a literal ``\\n`` (backslash, n), then ``,`` and the class label.

Every case must have the expected channels, all of one length; values must be finite numbers (a missing value ``?``
is an error: odelab fills no gaps); a class label must be one the header declares (or, without a declaration, one of
at most ``classes``); a target must be a finite number. Errors are a ValueError naming the file and the line.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .local import finite_numbers


class SeriesFile(NamedTuple):
    """One file's cases: ``series`` (n, steps, channels) float32; ``labels`` the class label of each case as written
    (classification) or the targets (n,) float64 (regression); ``declared`` the class labels the header declares,
    or None."""

    series: np.ndarray
    labels: list[str] | np.ndarray
    declared: tuple[str, ...] | None


def _labels_declared(path: Path, number: int, labels: list[str], problem: str, classes: int) -> tuple[str, ...]:
    labels = [label.strip().strip("'\"") for label in labels if label.strip()]
    if len(labels) != classes or len(set(labels)) != classes:
        raise ValueError(f"{path}, line {number}: the header declares the class labels {', '.join(labels) or 'none'}; "
                         f"{problem} has {classes} classes")
    return tuple(labels)


def read_series_file(path: str | Path, problem: str, channels: int, classes: int | None = None) -> SeriesFile:
    """The cases of one ``.ts`` or ``.arff`` file (by its suffix) of the archive problem ``problem`` (its name, for
    the messages), each of ``channels`` channels: classification with ``classes`` class labels, or regression (one
    float target per case, ``.ts`` only) when ``classes`` is None; see the module docstring. ValueError naming the
    file and the line."""
    path = Path(path)
    arff = path.suffix.lower() == ".arff"
    regression = classes is None
    if arff and regression:
        raise ValueError(f"{path}: {problem} has numeric targets, read from the archive's .ts files (not .arff)")
    what = "the target" if regression else "the class label"
    missing = f" (a missing value: {problem} has none and odelab fills no gaps)"
    comment = "%" if arff else "#"
    declared = header_length = None
    relational = data = False
    relational_steps = 0
    cases, labels, seen = [], [], {}
    length_source = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith(comment):
                continue
            if not data:
                if not line.startswith("@"):
                    raise ValueError(f"{path}, line {number}: expected a header line starting with '@' before "
                                     f"'@data', got {line[:40]!r}")
                words = line.split()
                tag = words[0].lower()
                flag = words[1].lower() if len(words) > 1 else ""
                if tag == "@data":
                    data = True
                    if arff and relational_steps:
                        header_length, length_source = relational_steps, "the header's relational attributes"
                elif arff and tag == "@attribute":
                    match = re.match(r"@attribute\s+('[^']*'|\"[^\"]*\"|\S+)\s+(.*)$", line, re.IGNORECASE)
                    kind = match.group(2).strip() if match else ""
                    if kind.lower() == "relational":
                        relational = True
                    elif relational:
                        relational_steps += 1
                    elif kind.startswith("{") and kind.endswith("}"):
                        declared = _labels_declared(path, number, kind[1:-1].split(","), problem, classes)
                elif arff and tag == "@end":
                    relational = False
                elif not arff and tag == "@classlabel":
                    if regression and flag == "true":
                        raise ValueError(f"{path}, line {number}: '@classLabel true': a classification file; {problem} "
                                         "has a numeric target per case ('@targetLabel true')")
                    if not regression:
                        if flag != "true":
                            raise ValueError(f"{path}, line {number}: '@classLabel {' '.join(words[1:2])}': the file "
                                             "has no class labels")
                        declared = _labels_declared(path, number, words[2:], problem, classes)
                elif not arff and tag == "@targetlabel":
                    if regression and flag != "true":
                        raise ValueError(f"{path}, line {number}: '@targetLabel {' '.join(words[1:2])}': the file has "
                                         "no targets")
                    if not regression and flag == "true":
                        raise ValueError(f"{path}, line {number}: '@targetLabel true': a regression file (a numeric "
                                         f"target per case); {problem} has class labels")
                elif not arff and tag == "@dimensions":
                    if words[1:] != [str(channels)]:
                        raise ValueError(f"{path}, line {number}: {line!r}, expected {channels} channels")
                elif not arff and tag == "@serieslength":
                    try:
                        header_length, length_source = int(words[1]), "the header's @seriesLength"
                    except (IndexError, ValueError):
                        raise ValueError(f"{path}, line {number}: {line!r}: not a length") from None
                elif not arff and tag == "@timestamps" and flag == "true":
                    raise ValueError(f"{path}, line {number}: time-stamped series are not supported")
                continue
            if arff:
                quote = line[0]
                end = line.find(quote, 1) if quote in "'\"" else -1  # the values hold no quotes
                rest = line[end + 1:].strip() if end > 0 else ""
                if end <= 0 or not rest.startswith(","):
                    raise ValueError(f"{path}, line {number}: expected 'CHANNEL\\nCHANNEL…',LABEL (the channels in "
                                     f"one quoted string, then the class label)")
                parts, label = line[1:end].split("\\n"), rest[1:].strip().strip("'\"")
            else:
                *parts, label = line.split(":")
                label = label.strip()
            if len(parts) != channels:
                separator = "'\\n'" if arff else "':'"
                raise ValueError(f"{path}, line {number}: {len(parts)} channel(s) separated by {separator}, "
                                 f"expected {channels} and {what} last")
            if not label:
                raise ValueError(f"{path}, line {number}: no {what[4:]} after the channels")
            if regression:
                labels.append(float(finite_numbers([label], f"{path}, line {number}, target", missing)[0]))
            else:
                if declared is not None and label not in declared:
                    raise ValueError(f"{path}, line {number}: class label {label!r} is not one of the labels its "
                                     f"header declares ({', '.join(declared)})")
                if label not in seen:
                    if len(seen) == classes:
                        raise ValueError(f"{path}, line {number}: class label {label!r}, a {classes + 1}th one "
                                         f"({problem} has {classes}: {', '.join(seen)} seen)")
                    seen[label] = number
                labels.append(label)
            series = []
            for channel, text in enumerate(parts, 1):
                values = finite_numbers(text.split(","), f"{path}, line {number}, channel {channel}", missing)
                if header_length is None:
                    header_length, length_source = len(values), f"as the first case, line {number}"
                if len(values) != header_length:
                    raise ValueError(f"{path}, line {number}, channel {channel}: {len(values)} values, expected "
                                     f"{header_length} ({length_source}); the series must all have one length")
                series.append(values.astype(np.float32))
            cases.append(np.stack(series, axis=1))
    if not data:
        raise ValueError(f"{path}: no '@data' line (not a UEA {'.arff' if arff else '.ts'} file)")
    if not cases:
        raise ValueError(f"{path}: no case after '@data'")
    return SeriesFile(np.stack(cases), np.array(labels, dtype=np.float64) if regression else labels, declared)


def count_option(name: str, value, low: int) -> int:
    """An integer option (the command line gives an int, ``odelab reproduce --option`` a string) >= ``low``."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return value


def keep_steps(series: np.ndarray, length: int | str | None, stride: int | str) -> tuple[np.ndarray, str]:
    """The first ``length`` steps (all by default) of ``series`` (n, steps, channels), then every ``stride``-th of
    them (steps 0, K, 2K, …: ⌈N / K⌉ steps), and a note saying so ("" when all are kept); ValueError naming the
    option."""
    steps = series.shape[1]
    length = steps if length is None else count_option("length", length, 1)
    stride = count_option("stride", stride, 1)
    if length > steps:
        raise ValueError(f"length: expected at most {steps} (the files' series length), got {length}")
    if length == steps and stride == 1:
        return series, ""
    return np.ascontiguousarray(series[:, :length:stride]), f" (the first {length}, every {stride})"
