"""Results of a run: results.json (everything), curves.csv (one row per epoch) and the terminal table."""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path


CURVE_COLUMNS = {"rmse": ["epoch", "train_rmse", "valid_rmse", "seconds"],
                 "accuracy": ["epoch", "train_loss", "valid_loss", "train_accuracy", "valid_accuracy", "seconds"]}


def write_results(result: dict, out_dir: str | Path) -> None:
    """results.json (everything) and curves.csv (one row per epoch: the RMSEs of a regression run, the
    cross-entropy and accuracy of a classification run)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write(out / "results.json", json.dumps(result, indent=2))
    h = result["history"]
    columns = CURVE_COLUMNS[result.get("metric", "rmse")]
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(columns)
    writer.writerows(zip(*(h[c] for c in columns)))
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
    """The test and validation RMSE (or accuracy and cross-entropy) beside the baselines, as the terminal's summary
    of a run."""
    if result.get("metric") == "accuracy":
        return _print_classification_table(result, out, figure)
    data = result.get("data") if isinstance(result.get("data"), dict) else {}
    if data.get("metric") == "MAE":  # the paper's reading: the baselines are mean absolute errors
        return _print_mae_table(result, out, figure)
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
    _print_skipped(result)


def _print_mae_table(result: dict, out: Path, figure: str) -> None:
    """Test RMSE and MAE (the reading's metric), validation RMSE, the baselines' MAE."""
    rows = [(f"test ({result['test_sequences']} sequences)", result["test_rmse"], result["test_mae"]),
            ("validation (best)", result["valid_rmse"], None)]
    rows += [(f"baseline: {k}", None, v) for k, v in result["baselines"].items()]
    width = max(len(name) for name, *_ in rows) + 2
    print(f"\n{'':{width}s}{'RMSE':>12s}{'MAE':>12s}")
    for name, rmse, mae in rows:
        print(f"{name:{width}s}" + "".join(f"{v:12.4e}" if v is not None else f"{'—':>12s}" for v in (rmse, mae)))
    print(f"best epoch {result['best_epoch']}, {result['parameters']} parameters, {result['wall_seconds']:.0f} s; "
          f"results in {out}/ (results.json, curves.csv, {figure}, curves.png)")
    _print_skipped(result)


def _print_classification_table(result: dict, out: Path, figure: str) -> None:
    """Accuracy (%) and mean cross-entropy (nats per predicted symbol) of test and validation, then the baselines,
    each in its own metric (``baseline_metrics``: "accuracy" or "cross-entropy")."""
    rows = [(f"test ({result['test_sequences']} sequences)", result["test_accuracy"], result["test_loss"]),
            ("validation (best)", result["valid_accuracy"], result["valid_loss"])]
    kinds = result.get("baseline_metrics", {})
    for name, value in result.get("baselines", {}).items():
        accuracy = kinds.get(name, "accuracy") == "accuracy"
        rows.append((f"baseline: {name}", value if accuracy else None, None if accuracy else value))
    width = max(len(name) for name, *_ in rows) + 2
    print(f"\n{'':{width}s}{'accuracy':>10s}{'cross-entropy':>15s}")
    for name, accuracy, loss in rows:
        a = f"{100 * accuracy:9.2f}%" if accuracy is not None else f"{'—':>10s}"
        c = f"{loss:15.4f}" if loss is not None else f"{'—':>15s}"
        print(f"{name:{width}s}{a}{c}")
    for key, value in result.items():
        if key.startswith("test_") and key.endswith("_accuracy") and key != "test_accuracy":
            print(f"{key[5:].replace('_', ' ')} (test): {100 * value:.2f}%")
    print(f"best epoch {result['best_epoch']} (highest validation accuracy, ties: lower loss), "
          f"{result['parameters']} parameters, {result['wall_seconds']:.0f} s; "
          f"results in {out}/ (results.json, curves.csv, {figure}, curves.png)")
    _print_skipped(result)


def _print_skipped(result: dict) -> None:
    """A line for an early stop, and one for the optimiser steps skipped for a non-finite gradient norm (training
    with clipping), if any."""
    if result.get("stopped_early"):
        patience = result.get("config", {}).get("patience")
        print(f"stopped early after epoch {result['stopped_early']}: {patience} epochs without a better validation "
              f"score (--patience)")
    skipped = result.get("history", {}).get("skipped_steps", 0)
    if skipped:
        print(f"warning: {skipped} optimiser step{'s' if skipped > 1 else ''} skipped for a non-finite gradient norm")
