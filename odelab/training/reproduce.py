"""The papers' tables (``odelab reproduce fhn|enso|mackey-glass``): the models of the paper's table under the paper's protocol, our
numbers next to the paper's.

Each model is one ``odelab fit TASK --model M --preset paper`` run in ``OUT/TASK-M`` (resumable: a finished run
with the same settings is reused, a stopped one continues from its checkpoint). Papers' numbers, verbatim:
FitzHugh--Nagumo test L² error (RMSE) ×10⁻² from Rusch et al. 2022, Table 4; ENSO and Mackey--Glass test MSE ×10⁻² from Erichson et al. 2025,
Tables 4, 8 and 9. LRCU and UnICORNN were not in these tables ("—"). Our metric is computed on all test
sequences; MSE = RMSE².
"""
from __future__ import annotations

import json
from pathlib import Path

from ..data.tasks import TASKS
from .run import FitError, FitSpec, run_fit

PAPER = {
    "fhn": ("RMSE", {"lstm": 1.2, "cornn": 0.4, "lem": 0.2, "lem-official": 0.2}),
    "enso": ("MSE", {"lstm": 0.92, "gru": 0.53, "cornn": 4.00, "lem": 0.31, "delaygru": 0.2317, "taugru": 0.17}),
    "mackey-glass": ("MSE", {"lstm": 0.6679, "gru": 0.4351, "cornn": 1.6835, "lem": 0.1430, "delaygru": 0.2772,
                             "taugru": 0.1358}),
}
EXTRA = ("lrcu-a", "unicornn")  # run beside the paper's models, no published number on these tasks


def default_models(task: str) -> list[str]:
    return [m for m in PAPER[task][1] if m != "lem-official"] + list(EXTRA)


def metric(result: dict, kind: str) -> float:
    return result["test_rmse"] if kind == "RMSE" else result["test_rmse"] ** 2


def _finished(run: Path, epochs: int, preset: str) -> dict | None:
    """The results of a finished run with these settings, else None (a shorter finished run is then extended
    from its checkpoint by ``--resume``)."""
    path = run / "results.json"
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    if result.get("preset") != preset or result["config"]["epochs"] != epochs:
        return None
    return result


def reproduce(task: str, models: list[str] | None = None, epochs: int | None = None, preset: str = "paper",
              seed: int = 1234, out: str | Path = "runs/reproduce", progress: bool = True) -> list[dict]:
    """Run (or reuse, or extend) every model's ``odelab fit`` run and write ``OUT/TASK.json``; returns the rows."""
    kind, paper = PAPER[task]
    if preset not in TASKS[task].presets:
        raise FitError(f"--preset: choose from {', '.join(TASKS[task].presets)}")
    epochs = epochs or TASKS[task].presets[preset]["epochs"]
    out = Path(out)
    rows = []
    for model in models or default_models(task):
        run = out / f"{task}-{model}" if preset == "paper" else out / f"{task}-{model}-{preset}"
        result = _finished(run, epochs, preset)
        if result is None:
            spec = FitSpec(task, model, preset, epochs=epochs, seed=seed, out=run, resume=True, progress=progress)
            try:
                run_fit(spec)
            except FitError as err:
                print(f"odelab reproduce: {model} failed: {err}; see {run}")
                continue
            result = _finished(run, epochs, preset)
        rows.append({"model": model, "preset": preset, "ours": metric(result, kind) * 100,
                     "paper": paper.get(model),
                     "epochs": result["config"]["epochs"], "best_epoch": result["best_epoch"],
                     "parameters": result["parameters"], "wall_seconds": result["wall_seconds"]})

    print(f"\n{task} ({preset} preset): test {kind} ×10⁻² on all test sequences "
          "(paper: verbatim from its table)")
    print(f"{'model':10s}{'ours':>10s}{'paper':>10s}{'epochs':>8s}{'params':>8s}")
    for r in rows:
        paper_value = f"{r['paper']:.4g}" if r["paper"] is not None else "—"
        print(f"{r['model']:10s}{r['ours']:10.4g}{paper_value:>10s}{r['epochs']:8d}{r['parameters']:8d}")
    path = out / f"{task}.json"
    table = merge_rows(json.loads(path.read_text())["rows"] if path.exists() else [], rows)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": task, "metric": f"{kind} x1e-2", "rows": table}, indent=2))
    print(f"written {path} ({len(table)} rows: earlier runs with other models, presets or epochs are kept)")
    return rows


def merge_rows(earlier: list[dict], new: list[dict]) -> list[dict]:
    """The table's rows after this call: a row per (model, preset, epochs), the new one replacing an earlier."""
    key = lambda row: (row["model"], row.get("preset", "paper"), row["epochs"])
    replaced = {key(row) for row in new}
    return [row for row in earlier if key(row) not in replaced] + new
