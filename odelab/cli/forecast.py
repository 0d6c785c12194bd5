"""``odelab forecast``: the next rows of a series after the end of its CSV file, from a model that ``odelab fit csv``
trained (``odelab.training.forecast``).

    odelab forecast --run DIR [--csv FILE] [--context N] [--missing error|previous|linear] [--out DIR]

``--csv`` reads a newer file with the run's columns (default: the run's own file); ``forecast.csv`` (a row per
step ahead), ``forecast.json`` and ``forecast_ahead.png`` go to ``--out`` (default: the run folder).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

from ..data.csv_series import FILLS
from ..training.forecast import forecast
from ..training.plots import plot_future
from ..training.saved import RunError
from . import arguments


def cmd_forecast(args: argparse.Namespace) -> int:
    try:
        result = forecast(args.run_dir, args.csv, args.context, args.missing)
    except RunError as err:
        raise SystemExit(f"odelab: forecast: --run: {err}") from None
    except ValueError as err:
        raise SystemExit(f"odelab: forecast: {err}") from None
    out = Path(args.out or args.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    times = [f"{t:.10g}" if isinstance(t, float) else t for t in result["times"] or [None] * len(result["rows"])]
    writer.writerow(["rows_ahead", *(["time"] if result["times"] else []), *result["columns"]])
    writer.writerows([h + 1, *([t] if result["times"] else []), *(f"{v:.10g}" for v in row)]
                     for h, (t, row) in enumerate(zip(times, result["rows"])))
    (out / "forecast.csv").write_text(table.getvalue())
    (out / "forecast.json").write_text(json.dumps({**result, "run": str(args.run_dir)}, indent=1))
    plot_future(result, out / "forecast_ahead.png",
                title=f"forecast of {', '.join(result['columns'][:3])} after row {result['rows_read'] - 1} of "
                      f"{Path(result['file']).name}")
    width = max(10, *(len(c) for c in result["columns"]))
    print(f"odelab forecast: {result['file']}, {result['rows_read']} rows; the model read the last "
          f"{result['context']}" + (" increments" if result["difference"] else " rows"))
    for column, count in result["filled"].items():
        print(f"  column {column!r}: {count} missing value{'s' * (count > 1)} filled")
    print(f"{'rows ahead':>10s}  " + "  ".join(f"{c:>{width}s}" for c in result["columns"]))
    print(f"{'0 (last)':>10s}  " + "  ".join(f"{v:>{width}.6g}" for v in result["last"]))
    for h, (t, row) in enumerate(zip(times, result["rows"])):
        print(f"{h + 1:>10d}  " + "  ".join(f"{v:>{width}.6g}" for v in row) + (f"  at {t}" if t is not None else ""))
    print(f"results in {out}/ (forecast.csv, forecast.json, forecast_ahead.png)")
    return 0


def add_command(sub) -> None:
    p = sub.add_parser("forecast", help="the next rows after the end of a CSV series, from an `odelab fit csv` run")
    p.add_argument("--run", dest="run_dir", required=True, help="the `odelab fit csv` run folder")
    p.add_argument("--csv", help="a file with the run's columns to forecast from (default: the run's own file)")
    p.add_argument("--context", type=arguments.integer(1),
                   help="rows the model reads before forecasting (>= 1; default: as many as the run's test part, "
                        "the length it was tested on)")
    p.add_argument("--missing", choices=FILLS,
                   help="missing cells (empty, NA, ...) of the file: an error, or filled from the row above or by "
                        "linear interpolation (default: as the run filled its own file)")
    p.add_argument("--out", help="output folder (default: the run folder)")
    p.set_defaults(run=cmd_forecast)
