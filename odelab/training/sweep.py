"""``odelab sweep TASK --model M --vary KEY=V1,V2,...``: one setting of a model or of a task varied over values and
seeds, the test metric against the value -- the papers' sensitivity figures: Rusch et al. 2022, Fig. 2 (accuracy
against Δt: ``--vary dt=...``), Fig. 3 (adding, N = 250 … 2000 with Δt = 1/√N: ``--vary length=...``), Fig. 6
(gates clipped to [2^−i, 1]: ``--vary min_gate=...``), Table 10 (``--vary chrono=...``).

KEY is a constructor keyword of the model (``odelab fit --model-option``) or an option of the task's data
(``--option``); each (value, seed) is one ``odelab fit`` run in its own folder of OUT, resumable and reused as by
``odelab reproduce``, several at once with ``jobs``. ``OUT/sweep-TASK-MODEL-KEY.json`` keeps one row per value
(every seed's metric, mean ± std) and ``.png`` draws them.
"""
from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

from ..data.tasks import TASKS
from .reproduce import _epochs_done, _finished, folder_options, option_key, parse_options, run_specs, summary
from .run import FitError, FitSpec, accepted_options


def parse_vary(task: str, model: str, text: str) -> tuple[str, str, list]:
    """``"dt=0.1,1"`` -> ``("dt", "model", [0.1, 1])``: KEY, whether it is a model keyword or a task option, and
    the values (model keywords read as Python literals, task options converted to the loader default's type)."""
    key, sep, rest = text.partition("=")
    items = [v.strip() for v in rest.split(",") if v.strip()]
    if not sep or not key or not items:
        raise FitError(f"--vary: expected KEY=V1,V2,..., got {text!r}")
    loader = inspect.signature(TASKS[task].load).parameters
    if key in loader and key != "seed":
        return key, "task", [parse_options(task, [f"{key}={item}"])[key] for item in items]
    if key in accepted_options(model):
        values = []
        for item in items:
            try:
                values.append(ast.literal_eval(item))
            except (ValueError, SyntaxError):
                values.append(item)
        return key, "model", values
    task_keys = [k for k in loader if k != "seed"]
    raise FitError(f"--vary: {key!r} is neither a keyword of {model} ({', '.join(accepted_options(model))}) nor an "
                   f"option of the task {task} ({', '.join(task_keys) or 'none'})")


def _metric(task: str, result: dict) -> float:
    return 100.0 * result["test_accuracy"] if TASKS[task].classification else result["test_rmse"]


def sweep(task: str, model: str, vary: str, preset: str = "quick", epochs: int | None = None, seed: int = 1234,
          seeds: int = 1, options: dict | None = None, model_options: dict | None = None,
          out: str | Path = "runs/sweep", device: str = "cpu", jobs: int = 1, threads: int | None = None,
          progress: bool = True) -> dict:
    """Train (or reuse, or extend) one run per (value, seed) and write ``OUT/sweep-TASK-MODEL-KEY.json``; returns
    it: ``rows`` of value, seeds, values, mean, std (test RMSE, or accuracy in %, on every test sequence)."""
    if task not in TASKS:
        raise FitError(f"unknown task {task!r}; choose from {', '.join(sorted(TASKS))}")
    if preset not in TASKS[task].presets:
        raise FitError(f"--preset: the task {task} has the preset(s) {', '.join(TASKS[task].presets)}, not {preset!r}")
    key, kind, values = parse_vary(task, model, vary)
    options, model_options = dict(options or {}), dict(model_options or {})
    epochs = epochs or TASKS[task].presets[preset]["epochs"]
    out = Path(out)
    folders, pending = {}, []
    for value in values:
        data_options = {**options, key: value} if kind == "task" else options
        keywords = {**model_options, key: value} if kind == "model" else model_options
        named = folder_options(data_options)
        name = "-".join([task] + ([option_key(named)] if named else []) + [model]
                        + ([option_key(keywords)] if keywords else []) + [preset])
        folders[value] = []
        for s in range(seed, seed + seeds):
            run = out / f"{name}-seed{s}"
            if _finished(run, epochs, preset) is None:
                if _epochs_done(run) > epochs:
                    raise FitError(f"{run} holds a run of {_epochs_done(run)} epochs, more than {epochs}; use another "
                                   "--out for a shorter protocol")
                pending.append(FitSpec(task, model, preset, epochs=epochs, seed=s, out=run, resume=True,
                                       progress=progress, data_options=data_options, model_options=keywords,
                                       device=device))
            folders[value].append(run)
    run_specs(pending, jobs, threads, progress)
    metric = "test accuracy (%)" if TASKS[task].classification else "test RMSE"
    rows = []
    for value, runs in folders.items():
        results = [r for r in (_finished(run, epochs, preset) for run in runs) if r is not None]
        if results:
            scores = [_metric(task, r) for r in results]
            mean, std = summary(scores)
            rows.append({"value": value, "seeds": [r["config"]["seed"] for r in results], "values": scores,
                         "mean": mean, "std": std, "best_epochs": [r["best_epoch"] for r in results],
                         "wall_seconds": sum(r["wall_seconds"] for r in results) / len(results)})
    result = {"task": task, "model": model, "key": key, "kind": kind, "preset": preset, "epochs": epochs,
              "options": options, "model_options": model_options, "metric": metric, "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"sweep-{task}-{model}-{key}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    if rows:
        from .plots import plot_sweep

        plot_sweep(result, stem.with_suffix(".png"))
    print(f"\n{task}: {model}, {key} varied ({kind} {'keyword' if kind == 'model' else 'option'}), {preset} preset, "
          f"{epochs} epochs; {metric} on every test sequence, mean ± std over seeds")
    print(f"{key:>14s}{'mean':>12s}{'std':>10s}{'seeds':>7s}")
    for row in rows:
        print(f"{str(row['value']):>14s}{row['mean']:12.4g}{row['std']:10.2g}{len(row['seeds']):7d}")
    print(f"written {stem.with_suffix('.json')}" + (f" and {stem.with_suffix('.png').name}" if rows else ""))
    return result
