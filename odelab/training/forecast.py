"""Forecasting past the end of a series with a model trained by ``odelab fit csv`` (``odelab forecast``).

The run's model reads the last ``context`` rows of the file (by default as many as its test part had: the length
it was tested on, from a zero state as then), normalised with the run's training mean and standard deviation, and
its output at the last row is the forecast of the next ``horizon`` rows (``odelab.data.csv_series``: target =
the H future rows, horizon-major), returned in the file's own units; for a run that modelled increments
(``--difference``) the forecast level is the last level plus the forecast increments summed. A run with a time
column (``--time``) reads each row's time to the next as well: the last row's is one median gap, and the rows
ahead are placed one median gap apart (the model reads only the gap to the first of them).
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import torch

from ..data.csv_series import read_columns, read_times, step_gaps
from .saved import RunError, load_run


def forecast(run: str | Path, csv: str | Path | None = None, context: int | None = None,
             missing: str | None = None) -> dict:
    """The forecast of the ``odelab fit csv`` run folder ``run`` after the last row of ``csv`` (default: the run's
    own file; another file must hold the run's columns), its missing cells filled by ``missing`` ("error",
    "previous", "linear"; default: as the run filled its own file): ``{"columns", "horizon", "rows": [H rows of the
    columns' forecast values], "last": the file's last row, "history": its last rows (at least 100, for a figure),
    "context", "file", "rows_read", "difference", "times": the rows' times ahead with a time column (else None),
    "history_times": those of the history rows, "time": the column, "filled": the missing cells filled per
    column}``. ValueError (a :class:`~odelab.training.saved.RunError` for the run) naming what does not fit."""
    model, info = load_run(run)
    if info["task"] != "csv":
        raise RunError(f"{Path(run) / 'results.json'}: a run of the task {info['task']!r}; forecast reads runs of "
                       "`odelab fit csv`")
    meta, options = info.get("data") or {}, info.get("data_options") or {}
    try:
        columns, horizon, difference = list(meta["columns"]), int(meta["horizon"]), bool(meta.get("difference"))
        mean, std = torch.tensor(meta["mean"], dtype=torch.float64), torch.tensor(meta["std"], dtype=torch.float64)
    except (KeyError, TypeError, ValueError):
        raise RunError(f"{Path(run) / 'results.json'} does not record the series' columns, horizon and "
                       "normalisation (data: columns, horizon, mean, std)") from None
    path = Path(csv if csv is not None else options.get("path", ""))
    if csv is None and not path.is_file() and meta.get("file"):  # a relative path from another folder
        path = Path(meta["file"])
    time = meta.get("time") if meta.get("time_gaps") else None
    _, levels, report = read_columns(path, columns, strict=True, encoding=options.get("encoding"),
                                missing=missing or options.get("missing", "error"), time=time)
    series = levels[1:] - levels[:-1] if difference else levels
    tested = meta.get("splits", {}).get("test")
    context = context if context is not None else (tested[1] - tested[0] if tested else series.shape[0])
    if not isinstance(context, int) or isinstance(context, bool) or context < 1:
        raise ValueError(f"context: expected a number of rows >= 1, got {context!r}")
    if series.shape[0] < 1:
        raise ValueError(f"csv: {str(path)!r} has {levels.shape[0]} rows; a forecast of increments needs 2")
    x = ((series[-context:] - mean) / std).float()
    shown = min(levels.shape[0], max(4 * horizon, 100))
    ahead = before = None
    if time is not None:  # each row's time to the next in the run's median gaps; past the end, one median gap
        median = float(meta["median_gap"])
        times, kind, origin = read_times(path, time, options.get("encoding"))
        x = torch.cat((x, step_gaps(times, difference, median)[-context:, None].float()), 1)
        ahead = [float(times[-1]) + h * median for h in range(1, horizon + 1)]
        before = times[-shown:].tolist()
        if kind == "datetime":
            ahead, before = ([(origin + timedelta(seconds=t)).isoformat() for t in moments]
                             for moments in (ahead, before))
    x = x.unsqueeze(0)
    with torch.no_grad():
        out = model(x)[0, -1].double().reshape(horizon, len(columns))
    values = out * std + mean
    if difference:
        values = levels[-1] + values.cumsum(0)
    return {"columns": columns, "horizon": horizon, "rows": values.tolist(), "last": levels[-1].tolist(),
            "context": int(min(context, series.shape[0])), "file": str(path), "rows_read": int(levels.shape[0]),
            "difference": difference, "history": levels[-shown:].tolist(), "times": ahead, "history_times": before,
            "time": time, "filled": report.get("filled", {})}
