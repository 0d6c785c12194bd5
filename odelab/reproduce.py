"""``odelab reproduce fhn|enso|mackey-glass``: the models of the paper's table under the paper's protocol, our
numbers next to the paper's.

Each model is one ``odelab fit TASK --model M --preset paper`` run in ``OUT/TASK-M`` (resumable: a finished run
with the same settings is reused, a stopped one continues from its checkpoint). Papers' numbers, verbatim:
FitzHugh--Nagumo test L² error (RMSE) ×10⁻² from 000 Table 4; ENSO and Mackey--Glass test MSE ×10⁻² from 001
Tables 4, 8 and 9. LRCU and UnICORNN were not in these tables ("—"). Our metric is computed on all test
sequences; MSE = RMSE².
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .tasks import TASKS

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


def cmd_reproduce(args: argparse.Namespace) -> int:
    from .cli import main as odelab_main

    kind, paper = PAPER[args.task]
    if args.preset not in TASKS[args.task].presets:
        raise SystemExit(f"odelab reproduce: --preset: choose from {', '.join(TASKS[args.task].presets)}")
    epochs = args.epochs or TASKS[args.task].presets[args.preset]["epochs"]
    models = args.models.split(",") if args.models else default_models(args.task)
    out = Path(args.out)
    rows = []
    for model in models:
        run = out / f"{args.task}-{model}" if args.preset == "paper" else out / f"{args.task}-{model}-{args.preset}"
        result = _finished(run, epochs, args.preset)
        if result is None:
            argv = ["fit", args.task, "--model", model, "--preset", args.preset, "--out", str(run), "--resume",
                    "--seed", str(args.seed), "--epochs", str(epochs)]
            argv += ["--threads", str(args.threads)] if args.threads is not None else []
            argv += ["--no-progress"] if args.no_progress else []
            if odelab_main(argv) != 0:
                print(f"odelab reproduce: {model} failed; see {run}")
                continue
            result = _finished(run, epochs, args.preset)
        rows.append({"model": model, "preset": args.preset, "ours": metric(result, kind) * 100,
                     "paper": paper.get(model),
                     "epochs": result["config"]["epochs"], "best_epoch": result["best_epoch"],
                     "parameters": result["parameters"], "wall_seconds": result["wall_seconds"]})

    print(f"\n{args.task} ({args.preset} preset): test {kind} ×10⁻² on all test sequences "
          "(paper: verbatim from its table)")
    print(f"{'model':10s}{'ours':>10s}{'paper':>10s}{'epochs':>8s}{'params':>8s}")
    for r in rows:
        paper_value = f"{r['paper']:.4g}" if r["paper"] is not None else "—"
        print(f"{r['model']:10s}{r['ours']:10.4g}{paper_value:>10s}{r['epochs']:8d}{r['parameters']:8d}")
    path = out / f"{args.task}.json"
    table = merge_rows(json.loads(path.read_text())["rows"] if path.exists() else [], rows)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": args.task, "metric": f"{kind} x1e-2", "rows": table}, indent=2))
    print(f"written {path} ({len(table)} rows: earlier runs with other models, presets or epochs are kept)")
    return 0


def merge_rows(earlier: list[dict], new: list[dict]) -> list[dict]:
    """The table's rows after this call: a row per (model, preset, epochs), the new one replacing an earlier."""
    key = lambda row: (row["model"], row.get("preset", "paper"), row["epochs"])
    replaced = {key(row) for row in new}
    return [row for row in earlier if key(row) not in replaced] + new


def add_reproduce_command(subparsers) -> None:
    p = subparsers.add_parser("reproduce", help="run the paper's table for a task and print ours next to theirs",
                              description=__doc__.split("\n\n")[1])
    p.add_argument("task", choices=sorted(PAPER))
    p.add_argument("--models", help="comma-separated subset (default: the paper's table plus lrcu-a, unicornn)")
    p.add_argument("--epochs", type=int, help="override the paper's epoch count (a shorter reproduction)")
    p.add_argument("--preset", default="paper", help="the task preset to run (default: paper; fhn also has "
                                                     "official-cuda, the official LEM_cuda example settings)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int)
    p.add_argument("--out", default="runs/reproduce")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=cmd_reproduce)
