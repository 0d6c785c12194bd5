"""Forecasting a user's own time series from a CSV file (``odelab fit csv --csv PATH``).

The file has a header row and one row per time step, in chronological order.

* Reading (:func:`read_columns`): the delimiter is sniffed (``,``, ``;``, tab or ``|``), a UTF-8 byte-order mark
  is dropped, other encodings are given with ``encoding`` (``--encoding latin-1``). Nothing is dropped
  silently: with ``columns`` every named column must parse completely (an error names the line of the first
  bad cell); without it the series are the numeric columns, except index- or date-like ones (strictly monotone
  with a constant step, or strictly monotone with a name such as ``year``, ``date``, ``time``, ``index``), which are
  named in the report; a numeric column with a missing or unparsable cell is left out and reported with the
  line of that cell, or is an error with ``strict`` (the default when ``columns`` is given). Thousands
  separators (``"1,000.00"``) are removed and decimal commas (``1,5`` in a ``;`` file) read, each reported by
  column; a value that could be either (``1,000`` in a ``;`` file) is refused by name. A row with more fields
  than the header (an unquoted delimiter inside a value) is always an error.
* Missing values (``missing``, ``--missing``): ``"error"`` (default) treats a missing cell (empty, ``NA``,
  ``nan``, ...) as a bad cell, as above; ``"previous"`` fills it with the last value above it, ``"linear"`` by
  linear interpolation between the nearest values above and below it (by row); before a column's first value or
  after its last, both take that value. A filled cell is then data like any other, for the model's inputs and
  targets and the test RMSE; each filled column is reported with its count and first line. Cells that are not
  numbers stay bad cells.
* Times (``time``, ``--time``): a column of the rows' times, numbers or ISO 8601 dates and times
  (:func:`read_times`), in order without repeats, never modelled. Each input row gets its time to the next row
  (in units of the training rows' median gap; the last row's next time is not in the file: one median gap) as its
  last feature, which :class:`~odelab.models.SequenceRegressor` hands to a continuous-time cell as its per-sample
  step and to any other body as an input (``meta["time_gaps"]``).
* Differencing (``difference=True``, ``--difference``): the model reads and forecasts the increments
  d_n = s_{n+1} − s_n instead of the levels; the per-column test RMSE is still reported in the file's units
  (the forecast level is the last known level plus the forecast increments). For trending series (CO₂).
* Split: chronological, the first 70 % of the rows train, the next 15 % validation, the last 15 % test.
* Normalisation: per column (x − mean) / std with mean and std of the TRAIN rows only (std 0 → 1); all
  RMSEs are in these normalised units. A validation or test part that leaves the training range by more than
  ``SHIFT_SIGMAS`` training standard deviation (a few from the training mean) gives a warning
  (``meta["warnings"]``, printed by ``odelab fit``).
* Windows: at step n the model reads s_n (all columns) and predicts s_{n+1}, …, s_{n+H} (H = ``horizon``;
  target = the H future rows concatenated, horizon-major), so H = 1 is one-step-ahead and H > 1 direct
  multi-step forecasting. Targets never cross a split boundary. Train: windows of ``window`` steps with
  stride ``window // 2``; validation and test: one sequence each, the whole part.
* Baseline: persistence, s_{n+h} ≈ s_n for every h (with ``difference``: increments 0, the same forecast of
  the level).
"""
from __future__ import annotations

import csv
import hashlib
import io
import itertools
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch

SPLIT_FRACTIONS = (("train", 0.70), ("valid", 0.15), ("test", 0.15))
MIN_STEPS = 2  # input/target pairs a split must keep at least
SHIFT_SIGMAS = 1.0  # warn when a later part leaves the training range by more than this many training stds
DELIMITERS = (",", ";", "\t", "|")
SNIFF_LINES = 50
MISSING = {"", "na", "n/a", "nan", "null", "none", "-", "?", "#n/a", "missing"}
FILLS = ("error", "previous", "linear")  # what ``missing`` may be
TIME_WORDS = {"date", "time", "datetime", "timestamp", "year", "yr", "month", "week", "day", "hour", "minute",
              "second", "index", "idx", "id", "t", "step", "period", "unnamed", "row"}
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")
DECIMAL_COMMA = re.compile(r"[+-]?\d*,\d+([eE][+-]?\d+)?")


@dataclass
class Column:
    """One column of the file as read: its values (None where a cell is bad) and what was found."""

    name: str
    values: list = field(default_factory=list)
    bad: list = field(default_factory=list)  # (line, cell, reason)
    note: str | None = None  # thousands separators / decimal commas read, missing values filled
    text: bool = False  # mostly not numbers (e.g. dates as text)
    filled: int = 0  # missing values filled (``missing``)

    def first_bad(self) -> str:
        line, cell, reason = self.bad[0]
        more = f" ({len(self.bad)} bad cells in all)" if len(self.bad) > 1 else ""
        return f"line {line}: {cell!r} {reason}{more}"


def _display(path: Path) -> str:
    return repr(str(path))


def read_text(path: str | Path, encoding: str | None = None) -> tuple[bytes, str]:
    """(raw bytes, text without a byte-order mark). ValueError naming the file and ``--encoding`` when the bytes
    are not text of that encoding (UTF-8 by default)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"csv: {'not a file' if path.exists() else 'no such file'} {_display(path)}")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ValueError(f"csv: cannot read {_display(path)}: {err.strerror or err}") from None
    name = encoding or "utf-8"
    try:
        text = raw.decode(name)
    except LookupError:
        raise ValueError(f"encoding: unknown encoding {name!r}") from None
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        hint = "e.g. --encoding latin-1 or --encoding cp1252" if encoding is None else "another --encoding"
        raise ValueError(f"csv: {_display(path)} is not {name} text (byte 0x{raw[err.start]:02x} on line {line}); "
                         f"give the file's encoding with {hint}") from None
    return raw, text.lstrip("\ufeff")


def sniff_delimiter(text: str) -> str:
    """The delimiter among ``DELIMITERS`` that splits the header into ≥ 2 fields and the most of the first lines
    into as many fields as the header (ties: the earlier in ``DELIMITERS``); "," when none does."""
    lines = [line for line in itertools.islice(text.splitlines(), 4 * SNIFF_LINES) if line.strip()][:SNIFF_LINES]
    best, best_score = ",", None
    for delimiter in DELIMITERS:
        rows = list(csv.reader(lines, delimiter=delimiter))
        if not rows or len(rows[0]) < 2:
            continue
        score = (sum(len(row) == len(rows[0]) for row in rows[1:]), len(rows[0]))
        if best_score is None or score > best_score:
            best, best_score = delimiter, score
    return best


def _parse_column(column: Column, cells: list[tuple[int, str]], delimiter: str) -> None:
    """Fill ``column.values`` / ``.bad`` / ``.note`` from its (line, cell) pairs."""
    kinds = []  # per cell: ("plain", value) | ("thousands", cell) | ("ambiguous", cell) | ("decimal", cell) | bad
    dotted = False
    for line, cell in cells:
        text = cell.strip()
        if NUMBER.fullmatch(text):
            kinds.append(("plain", float(text)))
            dotted = dotted or "." in text
        elif text.lower() in MISSING:
            kinds.append(("bad", "is a missing value"))
        elif text.lower().lstrip("+-") in ("inf", "infinity"):
            kinds.append(("bad", "is not finite"))
        elif THOUSANDS.fullmatch(text):
            strict = "." in text or text.count(",") > 1
            kinds.append(("thousands" if strict else "ambiguous", text))
        elif DECIMAL_COMMA.fullmatch(text):
            kinds.append(("decimal", text))
        else:
            kinds.append(("bad", "is not a number"))
    found = {kind for kind, _ in kinds}
    if "decimal" in found and "thousands" not in found and not dotted:
        mode = "decimal comma"
    elif "thousands" in found or ("ambiguous" in found and (dotted or delimiter == ",")):
        mode = "thousands"
    else:
        mode = None
    example = None
    for (line, cell), (kind, value) in zip(cells, kinds):
        if kind == "plain":
            column.values.append(value)
            continue
        number = None
        if kind == "thousands" and mode == "thousands" or kind == "ambiguous" and mode == "thousands":
            number = float(value.replace(",", ""))
        elif kind in ("decimal", "ambiguous") and mode == "decimal comma":
            number = float(value.replace(",", "."))
        if number is not None:
            column.values.append(number)
            example = example or (line, value, number)
            continue
        column.values.append(None)
        if kind == "bad":
            reason = value
        elif kind == "ambiguous":
            reason = "is ambiguous: a thousands separator or a decimal comma? (write 1000 or 1.000)"
        else:
            reason = "mixes thousands separators and decimal commas in one column"
        column.bad.append((line, cell, reason))
    if example is not None:
        line, cell, number = example
        what = "thousands separators removed" if mode == "thousands" else "decimal commas read"
        column.note = f"column {column.name!r}: {what} (e.g. {cell!r} on line {line} read as {number:g})"
    numbers = sum(v is not None for v in column.values)
    missing = sum(reason == "is a missing value" for _, _, reason in column.bad)
    column.text = numbers == 0 or numbers < (len(cells) - missing) / 2


def fill_missing(column: Column, how: str) -> None:
    """Fill a column's missing cells in place (``how``: "previous" or "linear", see the module's notes) when every
    bad cell of it is a missing value and it has at least one number; its ``note`` then says how many and where.
    Where some bad cells are not numbers, those remain its bad cells (the missing ones could be filled)."""
    values = column.values
    missing = [i for i, v in enumerate(values) if v is None]
    unfillable = [cell for cell in column.bad if "missing" not in cell[2]]
    if unfillable:  # cells that are not numbers: those keep the column out (or are the error), and are named
        column.bad = unfillable
        return
    if not missing or len(missing) == len(values):
        return
    above, below = [None] * len(values), [None] * len(values)  # the nearest row with a number, each way
    for i in range(1, len(values)):
        above[i] = i - 1 if values[i - 1] is not None else above[i - 1]
    for i in range(len(values) - 2, -1, -1):
        below[i] = i + 1 if values[i + 1] is not None else below[i + 1]
    for i in missing:
        a, b = above[i], below[i]
        if a is None or b is None or how == "previous":
            values[i] = values[a if a is not None else b]
        else:  # linear: between the nearest numbers above and below, by row
            w = (i - a) / (b - a)
            values[i] = (1 - w) * values[a] + w * values[b]
    line = column.bad[0][0]
    way = "the value above" if how == "previous" else "linear interpolation"
    filled = f"column {column.name!r}: {len(missing)} missing value{'s' * (len(missing) > 1)} filled by {way} " \
             f"(first on line {line})"
    column.note = filled if column.note is None else f"{column.note}; {filled}"
    column.filled = len(missing)
    column.bad = []


def index_like(name: str, values: list[float]) -> str | None:
    """Why a numeric column looks like an index or a date (so it is not modelled by default), else None."""
    if len(values) < 3:
        return None
    steps = [b - a for a, b in zip(values, values[1:])]
    increasing, decreasing = all(s > 0 for s in steps), all(s < 0 for s in steps)
    if not (increasing or decreasing):
        return None
    direction = "increasing" if increasing else "decreasing"
    first = steps[0]
    if all(abs(s - first) <= 1e-9 * max(1.0, abs(first)) for s in steps):
        return f"strictly {direction} with a constant step {first:g}: an index or time column"
    words = set(re.split(r"[^a-z0-9]+", name.lower())) | {name.lower().strip()}
    if words & TIME_WORDS:
        return f"strictly {direction}, and its name reads like a time or index"
    return None


def _table(path: Path, encoding: str | None) -> tuple[bytes, str, list[str], list[list[tuple[int, str]]], list[int]]:
    """(the file's bytes, its delimiter, the header's names, each column's (line, cell) pairs, the lines of rows
    shorter than the header). ValueError naming the file on a table it cannot read."""
    raw, text = read_text(path, encoding)
    delimiter = sniff_delimiter(text)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        rows = [(reader.line_num, row) for row in reader if row]
    except csv.Error as err:
        raise ValueError(f"csv: {_display(path)} line {reader.line_num}: {err}") from None
    while rows and not any(cell.strip() for cell in rows[-1][1]):
        rows.pop()  # empty rows at the end (spreadsheet exports)
    if len(rows) < 2:
        raise ValueError(f"csv: {_display(path)} needs a header row and at least one data row, got {len(rows)} rows")
    header = [name.strip() for name in rows[0][1]]
    while len(header) > 1 and not header[-1]:
        header.pop()  # a trailing delimiter
    header = [name or f"column{j + 1}" for j, name in enumerate(header)]
    seen = {}
    for j, name in enumerate(header):
        if name in seen:
            raise ValueError(f"csv: {_display(path)} names the column {name!r} twice (fields {seen[name] + 1} and "
                             f"{j + 1} of the header); rename one")
        seen[name] = j
    width = len(header)
    cells: list[list[tuple[int, str]]] = [[] for _ in header]
    short = []
    for line, row in rows[1:]:
        if len(row) > width and any(cell.strip() for cell in row[width:]):
            sample = delimiter.join(row)
            raise ValueError(f"csv: {_display(path)} line {line} has {len(row)} fields but the header has {width} "
                             f"({sample[:60]!r}); a delimiter {delimiter!r} inside a value, e.g. an unquoted "
                             f"thousands separator? Quote such values or fix the line")
        for j in range(width):
            cells[j].append((line, row[j] if j < len(row) else ""))
        if len(row) < width:
            short.append(line)
    return raw, delimiter, header, cells, short


def read_columns(path: str | Path, columns: list[str] | None = None, strict: bool | None = None,
                 encoding: str | None = None, missing: str = "error", time: str | None = None) \
        -> tuple[list[str], torch.Tensor, dict]:
    """(names, values (rows, len(names)) float64, report). ValueError naming ``csv``/``columns``/``encoding``/
    ``missing`` on bad input. ``strict`` (default: ``columns is not None``) makes a numeric column with a bad cell
    an error instead of leaving it out; ``missing`` ("error", "previous", "linear") fills missing cells first;
    ``time``: the time column (:func:`read_times`), never modelled. The report has the delimiter, the encoding, the
    file's sha256, the columns left out with their reasons (``excluded``), the missing values filled per column
    (``filled``) and ``notes`` to show the user."""
    if missing not in FILLS:
        raise ValueError(f"missing: expected one of {', '.join(FILLS)}, got {missing!r}")
    path = Path(path)
    strict = columns is not None if strict is None else strict
    raw, delimiter, header, cells, short = _table(path, encoding)
    parsed = {}
    for j, name in enumerate(header):
        column = Column(name)
        _parse_column(column, cells[j], delimiter)
        if short:  # say why a cell is missing when the row is short
            column.bad = [(line, cell, "is missing: the row has fewer fields than the header" if line in short
                           and cell == "" else reason) for line, cell, reason in column.bad]
        if missing != "error" and not column.text:
            fill_missing(column, missing)
        parsed[name] = column
    report = {"file": str(path.resolve()), "sha256": hashlib.sha256(raw).hexdigest(), "delimiter": delimiter,
              "encoding": encoding or "utf-8", "excluded": {}, "notes": [], "filled": {}}
    if delimiter != ",":
        report["notes"].append(f"delimiter {delimiter!r} (sniffed)")

    if time is not None and time not in parsed:
        raise ValueError(f"time: unknown column {time!r}; the file has {header}")
    if columns is not None:
        unknown = [name for name in columns if name not in parsed]
        if unknown:
            raise ValueError(f"columns: unknown column(s) {unknown}; the file has {header}")
        if time in columns:
            raise ValueError(f"columns: {time!r} is the time column (--time), which gives the steps, not a series")
        if len(set(columns)) != len(columns):
            raise ValueError(f"columns: a column is named twice in {columns}")
        for name in columns:
            if parsed[name].bad:
                hint = "; --missing previous|linear fills missing values" if missing == "error" and any(
                    "missing" in reason for _, _, reason in parsed[name].bad) else ""
                raise ValueError(f"columns: column {name!r} has a missing or non-numeric value: "
                                 f"{parsed[name].first_bad()}{hint}")
        chosen = list(columns)
    else:
        chosen, damaged = [], []
        for name, column in parsed.items():
            if name == time:
                report["excluded"][name] = "the time column (--time)"
            elif column.text:
                line, cell, _ = column.bad[0]
                report["excluded"][name] = f"not numeric, e.g. line {line}: {cell!r}"
            elif column.bad:
                report["excluded"][name] = f"a bad cell: {column.first_bad()}"
                damaged.append(name)
            elif (why := index_like(name, column.values)) is not None:
                report["excluded"][name] = why
            else:
                chosen.append(name)
        if damaged and strict:
            raise ValueError("csv: --strict: " + "; ".join(f"column {n!r} has {report['excluded'][n]}" for n in damaged)
                             + "; fix or fill those cells (--missing previous|linear fills missing ones), or choose "
                               "the columns with --columns")
        if not chosen:
            listed = list(report["excluded"].items())
            reasons = "; ".join(f"{n[:40]!r}: {why[:120]}" for n, why in listed[:5])
            reasons += f"; and {len(listed) - 5} more columns" if len(listed) > 5 else ""
            raise ValueError(f"csv: {_display(path)} has no column to model ({reasons}); name the columns with "
                             f"--columns, or fix or fill the bad cells (--missing previous|linear fills missing ones)")
        if report["excluded"]:
            report["notes"].append("columns not modelled: " + "; ".join(
                f"{n!r} ({why})" for n, why in report["excluded"].items()) + "; --columns picks them explicitly")
    report["notes"] += [parsed[name].note for name in chosen if parsed[name].note]
    report["filled"] = {name: parsed[name].filled for name in chosen if parsed[name].filled}
    values = torch.tensor([parsed[name].values for name in chosen], dtype=torch.float64).T
    return chosen, values, report


def read_times(path: str | Path, name: str, encoding: str | None = None) \
        -> tuple[torch.Tensor, str, datetime | None]:
    """The time column ``name`` of the file as float64, its kind and origin: ``"datetime"`` (dates or times in ISO
    8601, as :meth:`datetime.datetime.fromisoformat` reads them, e.g. ``2024-03-01`` or ``2024-03-01 12:30:00``:
    seconds since the first row, the origin) or ``"number"`` (the numbers themselves, origin None). The rows must
    be in time order without repeats. ValueError naming ``time`` and the line of the first cell that is not a
    time or not after the one above it."""
    path = Path(path)
    _, _, header, cells, _ = _table(path, encoding)
    if name not in header:
        raise ValueError(f"time: unknown column {name!r}; the file has {header}")
    values, kinds, first = [], set(), None
    for line, cell in cells[header.index(name)]:
        text = cell.strip()
        if NUMBER.fullmatch(text):
            values.append(float(text))
            kinds.add("number")
            continue
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"time: line {line}: {cell!r} is neither a number nor an ISO 8601 date or time (e.g. "
                             "2024-03-01 or 2024-03-01T12:30:00)") from None
        first = first or moment
        try:
            values.append((moment - first).total_seconds())
        except TypeError:  # one with a UTC offset and one without
            raise ValueError(f"time: line {line}: {cell!r} and the first time differ in having a UTC offset; give "
                             "every time with one, or none") from None
        kinds.add("datetime")
    if len(kinds) > 1:
        raise ValueError(f"time: the column {name!r} mixes numbers and dates")
    for (line, cell), (above, cell_above), a, b in zip(cells[header.index(name)][1:], cells[header.index(name)],
                                                       values, values[1:]):
        if not b > a:
            raise ValueError(f"time: line {line}: {cell.strip()!r} is not after line {above}'s "
                             f"{cell_above.strip()!r}; the rows must be in time order, without repeats")
    return torch.tensor(values, dtype=torch.float64), kinds.pop(), first


def split_bounds(rows: int) -> list[tuple[str, int, int]]:
    """``(name, first row, end row)`` of the chronological 70/15/15 split."""
    train_end = int(math.floor(rows * SPLIT_FRACTIONS[0][1]))
    valid_end = train_end + int(math.floor(rows * SPLIT_FRACTIONS[1][1]))
    return [("train", 0, train_end), ("valid", train_end, valid_end), ("test", valid_end, rows)]


def forecast_pairs(series: torch.Tensor, horizon: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs s_0..s_{T−H−1} ``(T − H, C)`` and targets [s_{n+1}, …, s_{n+H}] ``(T − H, H·C)``."""
    steps = series.shape[0] - horizon
    return series[:steps], torch.cat([series[h:h + steps] for h in range(1, horizon + 1)], 1)


def windows(x: torch.Tensor, y: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Overlapping windows (stride window // 2) ``(N, window, ·)``; the whole part when it is shorter."""
    steps = x.shape[0]
    if steps <= window:
        return x.unsqueeze(0), y.unsqueeze(0)
    stride = max(1, window // 2)
    starts = list(range(0, steps - window + 1, stride))
    if starts[-1] != steps - window:
        starts.append(steps - window)  # the last rows are not left out
    return torch.stack([x[s:s + window] for s in starts]), torch.stack([y[s:s + window] for s in starts])


def distribution_shift(names: list[str], series: torch.Tensor, bounds, what: str = "values") -> list[str]:
    """Warnings for every later part whose values leave the training range by more than ``SHIFT_SIGMAS`` training
    standard deviations (a trend the model never saw: expect it to do worse than persistence)."""
    train = series[bounds[0][1]:bounds[0][2]]
    low, high = train.min(0).values, train.max(0).values
    mean, std = train.mean(0), train.std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    warnings = []
    for part, first, end in bounds[1:]:
        rows = series[first:end]
        beyond = torch.maximum(rows.max(0).values - high, low - rows.min(0).values) / std
        far = ((rows - mean).abs().max(0).values / std)
        for c, name in enumerate(names):
            if float(beyond[c]) > SHIFT_SIGMAS:
                warnings.append(f"distribution shift: the {part} part of {name!r} (rows {first}–{end - 1}) reaches "
                                f"{float(far[c]):.1f} training standard deviations from the training mean of its "
                                f"{what}, {float(beyond[c]):.1f} beyond the training range; the model has not seen "
                                "such values and may do worse than persistence"
                                + ("; --difference models the increments of a trending series" if what == "values"
                                   else ""))
    return warnings


def step_gaps(times: torch.Tensor, difference: bool, median: float | None = None) -> torch.Tensor:
    """Each modelled row's time to the next row, in units of the median gap (``median``, default the times' own):
    with ``difference`` row k is the increment that ends at times[k + 1]. The last row, whose next time is not in
    the file, gets one median gap (what a forecast past the end assumes)."""
    gaps = times[1:] - times[:-1]
    median = float(gaps.quantile(0.5)) if median is None else median
    gaps = gaps[1:] if difference else gaps
    return torch.cat((gaps, gaps.new_tensor([median]))) / median


def csv_series(path: str | Path, columns: list[str] | None = None, horizon: int = 1, window: int = 64,
               strict: bool | None = None, encoding: str | None = None, difference: bool = False,
               missing: str = "error", time: str | None = None) -> dict:
    """``{split: (inputs, targets)}`` float32 plus ``"meta"`` (columns, horizon, split rows, train mean/std, the
    reading report, warnings). With ``time`` (a column of times, :func:`read_times`) each input row also carries
    its time to the next row in median gaps as its last feature (``meta["time_gaps"]``: the continuous-time cells
    step by it, the others read it)."""
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise ValueError(f"horizon: expected an integer >= 1, got {horizon!r}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 2:
        raise ValueError(f"window: expected an integer >= 2, got {window!r}")
    names, values, report = read_columns(path, columns, strict, encoding, missing, time)
    levels = values
    if difference:
        values = values[1:] - values[:-1]
    bounds = split_bounds(values.shape[0])
    for name, first, end in bounds:
        if end - first < horizon + MIN_STEPS:
            need = next(n for n in itertools.count(values.shape[0] + 1)
                        if all(e - f >= horizon + MIN_STEPS for _, f, e in split_bounds(n)))
            raise ValueError(f"csv: the series has {values.shape[0]} rows{' of increments' if difference else ''}; "
                             f"the chronological 70/15/15 split leaves the {name} part {end - first} rows, fewer "
                             f"than horizon + {MIN_STEPS} = {horizon + MIN_STEPS}: give at least "
                             f"{need + int(difference)} rows")
    gaps = None
    if time is not None:  # the unit of time: the median gap between the training rows, as they set mean and std
        times, kind, _ = read_times(path, time, encoding)
        trained = times[:bounds[0][2] + 1 + int(difference)]
        median = float((trained[1:] - trained[:-1]).quantile(0.5))  # the mean of the middle two of an even count
        gaps = step_gaps(times, difference, median).float()
        report.update(time=time, time_kind=kind, median_gap=median)
        unit = "seconds" if kind == "datetime" else "units"
        report["notes"].append(f"time column {time!r}: each row's time to the next in median gaps of the training "
                               f"rows ({median:g} {unit}), from {float(gaps.min()):.3g} to {float(gaps.max()):.3g}")
    train = values[bounds[0][1]:bounds[0][2]]
    mean, std = train.mean(0), train.std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    normalised = ((values - mean) / std).float()
    out: dict = {}
    for name, first, end in bounds:
        x, y = forecast_pairs(normalised[first:end], horizon)
        if gaps is not None:  # the time to the next row, beside the row's values
            x = torch.cat((x, gaps[first:first + x.shape[0], None]), 1)
        out[name] = windows(x, y, window) if name == "train" else (x.unsqueeze(0), y.unsqueeze(0))
    warnings = distribution_shift(names, values, bounds, "increments" if difference else "values")
    out["meta"] = {"columns": names, "horizon": horizon, "window": window, "rows": int(levels.shape[0]),
                   "difference": bool(difference), "splits": {name: [first, end] for name, first, end in bounds},
                   "mean": mean.tolist(), "std": std.tolist(), **report, "warnings": warnings,
                   **({"time_gaps": True} if gaps is not None else {})}
    return out


def persistence_rmse(x: torch.Tensor, y: torch.Tensor) -> float:
    """RMSE of predicting every future row by the current one: s_{n+h} ≈ s_n."""
    horizon = y.shape[-1] // x.shape[-1]
    return float(((x.repeat(1, 1, horizon) - y) ** 2).mean().sqrt())


def _values(x: torch.Tensor, meta: dict) -> torch.Tensor:
    """The rows' values without the time-gap feature (``meta["time_gaps"]``)."""
    return x[..., :len(meta["columns"])] if meta.get("time_gaps") else x


def _persistence_prediction(x: torch.Tensor, y: torch.Tensor, meta: dict) -> torch.Tensor:
    """Persistence in the model's units: the current row, or for differenced series increments of 0 (the level
    stays), which is −mean/std after normalisation."""
    x = _values(x, meta)
    horizon = y.shape[-1] // x.shape[-1]
    if not meta.get("difference"):
        return x.repeat(1, 1, horizon)
    zero = -torch.tensor(meta["mean"], dtype=y.dtype) / torch.tensor(meta["std"], dtype=y.dtype)
    return zero.repeat(horizon).expand_as(y)


def csv_persistence_rmse(data: dict) -> float:
    """Test RMSE of persistence in the model's (normalised) units: comparable with the model's test RMSE."""
    x, y = data["test"]
    return float(((_persistence_prediction(x, y, data.get("meta", {})) - y) ** 2).mean().sqrt())


def rmse_by_column(prediction: torch.Tensor, x: torch.Tensor, y: torch.Tensor, meta: dict) -> dict[str, dict]:
    """Test RMSE per column in the file's own units (normalised error × train std), model and persistence. For
    differenced series, the error of the forecast LEVEL: the h-step level error is the sum of the first h
    increment errors."""
    columns, std = meta["columns"], torch.tensor(meta["std"], dtype=torch.float64)
    horizon = y.shape[-1] // len(columns)

    def per_column(error: torch.Tensor) -> torch.Tensor:  # (..., H·C) -> (C,)
        error = error.double().reshape(-1, horizon, len(columns)) * std
        if meta.get("difference"):
            error = error.cumsum(1)
        return error.pow(2).mean((0, 1)).sqrt()

    model, persistence = per_column(prediction - y), per_column(_persistence_prediction(x, y, meta) - y)
    return {name: {"model": float(m), "persistence": float(p)} for name, m, p in zip(columns, model, persistence)}
