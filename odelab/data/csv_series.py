"""Forecasting a user's own time series from a CSV file (``odelab fit csv --csv PATH``).

The file has a header row and one row per time step, in chronological order. ``columns`` picks the series
(default: every column whose values all parse as numbers, e.g. not a date column).

* Split: chronological, the first 70 % of the rows train, the next 15 % validation, the last 15 % test.
* Normalisation: per column (x − mean) / std with mean and std of the TRAIN rows only (std 0 → 1); all
  RMSEs are in these normalised units.
* Windows: at step n the model reads s_n (all columns) and predicts s_{n+1}, …, s_{n+H} (H = ``horizon``;
  target = the H future rows concatenated, horizon-major), so H = 1 is one-step-ahead and H > 1 direct
  multi-step forecasting. Targets never cross a split boundary. Train: windows of ``window`` steps with
  stride ``window // 2``; validation and test: one sequence each, the whole part.
* Baseline: persistence, s_{n+h} ≈ s_n for every h.
"""
from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

import torch

SPLIT_FRACTIONS = (("train", 0.70), ("valid", 0.15), ("test", 0.15))
MIN_STEPS = 2  # input/target pairs a split must keep at least


def read_columns(path: str | Path, columns: list[str] | None = None) -> tuple[list[str], torch.Tensor]:
    """(names, values (rows, len(names)) float64). ValueError naming ``csv``/``columns`` on bad input."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"csv: no such file {str(path)!r}")
    with open(path, newline="") as f:
        rows = [row for row in csv.reader(f) if row and any(cell.strip() for cell in row)]
    if len(rows) < 2:
        raise ValueError(f"csv: {str(path)!r} needs a header row and at least one data row, got {len(rows)} rows")
    header, body = [name.strip() for name in rows[0]], rows[1:]

    def parse(j: int) -> list[float] | None:
        try:
            return [float(row[j]) for row in body]
        except (ValueError, IndexError):
            return None

    if columns is None:
        parsed = {name: parse(j) for j, name in enumerate(header)}
        columns = [name for name, values in parsed.items() if values is not None]
        if not columns:
            raise ValueError(f"csv: {str(path)!r} has no column whose values are all numbers (header {header})")
    else:
        unknown = [name for name in columns if name not in header]
        if unknown:
            raise ValueError(f"columns: unknown column(s) {unknown}; the file has {header}")
        parsed = {}
        for name in columns:
            parsed[name] = parse(header.index(name))
            if parsed[name] is None:
                raise ValueError(f"columns: column {name!r} has a missing or non-numeric value")
    values = torch.tensor([parsed[name] for name in columns], dtype=torch.float64).T
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"csv: columns {columns} contain NaN or Inf")
    return columns, values


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


def csv_series(path: str | Path, columns: list[str] | None = None, horizon: int = 1, window: int = 64) -> dict:
    """``{split: (inputs, targets)}`` float32 plus ``"meta"`` (columns, horizon, split rows, train mean/std)."""
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise ValueError(f"horizon: expected an integer >= 1, got {horizon!r}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window: expected an integer >= 1, got {window!r}")
    names, values = read_columns(path, columns)
    bounds = split_bounds(values.shape[0])
    for name, first, end in bounds:
        if end - first < horizon + MIN_STEPS:
            need = next(n for n in itertools.count(values.shape[0] + 1)
                        if all(e - f >= horizon + MIN_STEPS for _, f, e in split_bounds(n)))
            raise ValueError(f"csv: the series has {values.shape[0]} rows; the chronological 70/15/15 split leaves "
                             f"the {name} part {end - first} rows, fewer than horizon + {MIN_STEPS} = "
                             f"{horizon + MIN_STEPS}: give at least {need} rows")
    train = values[bounds[0][1]:bounds[0][2]]
    mean, std = train.mean(0), train.std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    normalised = ((values - mean) / std).float()
    out: dict = {}
    for name, first, end in bounds:
        x, y = forecast_pairs(normalised[first:end], horizon)
        out[name] = windows(x, y, window) if name == "train" else (x.unsqueeze(0), y.unsqueeze(0))
    out["meta"] = {"columns": names, "horizon": horizon, "window": window, "rows": int(values.shape[0]),
                   "splits": {name: [first, end] for name, first, end in bounds},
                   "mean": mean.tolist(), "std": std.tolist()}
    return out


def persistence_rmse(x: torch.Tensor, y: torch.Tensor) -> float:
    """RMSE of predicting every future row by the current one: s_{n+h} ≈ s_n."""
    horizon = y.shape[-1] // x.shape[-1]
    return float(((x.repeat(1, 1, horizon) - y) ** 2).mean().sqrt())


def rmse_by_column(prediction: torch.Tensor, x: torch.Tensor, y: torch.Tensor, meta: dict) -> dict[str, dict]:
    """Test RMSE per column in the file's own units (normalised error × train std), model and persistence."""
    columns, std = meta["columns"], torch.tensor(meta["std"], dtype=torch.float64)
    horizon = y.shape[-1] // x.shape[-1]

    def per_column(error: torch.Tensor) -> torch.Tensor:  # (..., H·C) -> (C,)
        return error.double().reshape(-1, horizon, len(columns)).pow(2).mean((0, 1)).sqrt() * std

    model, persistence = per_column(prediction - y), per_column(x.repeat(1, 1, horizon) - y)
    return {name: {"model": float(m), "persistence": float(p)} for name, m, p in zip(columns, model, persistence)}
