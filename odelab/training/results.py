"""Results of a run: results.json (everything), curves.csv (one row per epoch) and the terminal table."""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path


def write_results(result: dict, out_dir: str | Path) -> None:
    """results.json (everything) and curves.csv (one row per epoch)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "results.json", json.dumps(result, indent=2))
    h = result["history"]
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(["epoch", "train_rmse", "valid_rmse", "seconds"])
    writer.writerows(zip(h["epoch"], h["train_rmse"], h["valid_rmse"], h["seconds"]))
    _atomic_write(out / "curves.csv", table.getvalue())


def _atomic_write(path: Path, text: str) -> None:
    """Write a temporary file beside ``path``, then rename: an interrupted run never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def print_table(result: dict, out: Path, figure: str) -> None:
    """The test and validation RMSE beside the baselines, as the terminal's summary of a run."""
    rows = [(f"test ({result['test_sequences']} sequences)", result["test_rmse"]),
            ("validation (best)", result["valid_rmse"])] + [(f"baseline: {k}", v) for k, v in result["baselines"].items()]
    width = max(len(name) for name, _ in rows) + 2
    print(f"\n{'':{width}s}{'RMSE':>12s}")
    for name, value in rows:
        print(f"{name:{width}s}{value:12.4e}")
    for column, values in result.get("test_rmse_by_column", {}).items():
        print(f"test RMSE of {column!r} in its own units: model {values['model']:.4g}, "
              f"persistence {values['persistence']:.4g}")
    for warning in result.get("data", {}).get("warnings", []) if isinstance(result.get("data"), dict) else []:
        print(f"warning: {warning}")
    print(f"best epoch {result['best_epoch']}, {result['parameters']} parameters, {result['wall_seconds']:.0f} s; "
          f"results in {out}/ (results.json, curves.csv, {figure}, curves.png)")
