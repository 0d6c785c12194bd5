"""``odelab gates``: the multiscale steps h · decay of a trained gated cell over the test sequences -- for LEM the
histograms of Δt_n and Δt̄_n of Rusch et al. 2022, Figs. 4, 5, 7 (``odelab.analysis.gates``).

    odelab gates --run DIR [--sequences N] [--marks 1,0.02] [--out DIR]

Fig. 4 of the paper: ``odelab fit fhn --model lem --model-option dt=2 --out runs/fhn-lem-dt2`` then
``odelab gates --run runs/fhn-lem-dt2 --marks 0.4,0.008`` (the true scales 1 and τ = 0.02 per time unit, times
the data's sample spacing 0.4).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ..analysis import gates, plots
from ..analysis.schemes import json_ready, recurrent_layers
from . import arguments, runs


def _marks(text: str | None) -> tuple[float, ...]:
    if not text:
        return ()
    try:
        marks = tuple(float(m) for m in text.split(","))
    except ValueError:
        raise SystemExit(f"odelab: gates: --marks: expected comma-separated positive numbers, got {text!r}") from None
    if any(not m > 0 for m in marks):
        raise SystemExit(f"odelab: gates: --marks: expected positive numbers (a log axis), got {text!r}")
    return marks


def cmd_gates(args: argparse.Namespace) -> int:
    marks = _marks(args.marks)
    run = Path(args.run_dir)
    tic = time.perf_counter()
    model, info = runs.load_run(run, "gates")
    task_name, model_name = info["task"], info["model"]
    x = runs.run_data(info, "gates")["test"][0][:args.sequences]
    try:
        layers = recurrent_layers(model)
    except (TypeError, ValueError) as err:
        raise SystemExit(f"odelab: gates: {run}: {str(err).strip().splitlines()[0][:200]}") from None
    if len(layers) != 1:
        raise SystemExit(f"odelab: gates: {model_name} has {len(layers)} recurrent layers; the study reads one")
    with torch.no_grad():  # embedded tokens, a suffix appended, the time gaps split off as the step
        x, step = model.body_inputs(x)
    try:
        steps = gates.effective_steps(layers[0], x, dt=step.get("dt"))
    except ValueError as err:
        raise SystemExit(f"odelab: gates: {model_name}: {err}") from None
    summary = gates.step_summary(steps)
    out = Path(args.out or run)
    out.mkdir(parents=True, exist_ok=True)
    result = {"run": str(run), "task": task_name, "model": model_name, "model_options": info.get("model_options"),
              "sequences": int(x.shape[0]), "steps": int(x.shape[1]), "marks": list(marks), "blocks": summary}
    (out / "gates.json").write_text(json.dumps(json_ready(result), indent=1))
    plots.plot_step_histograms(steps, summary, out / "gates.png", marks,
                               title=f"{task_name}: {model_name}, steps h · decay over {x.shape[0]} test sequences")
    print(f"{'block':6s}{'1 %':>10s}{'median':>10s}{'99 %':>10s}{'decades':>9s}  tail (R²: power law / exponential)")
    for block, row in summary.items():
        q, tail = row["quantiles"], row["tail"]
        fit = "too few values" if tail is None else (f"{tail['better']} ({tail['power_law']['r2']:.2f} / "
                                                      f"{tail['exponential']['r2']:.2f})")
        print(f"{block:6s}{q['0.01']:10.3g}{q['0.5']:10.3g}{q['0.99']:10.3g}{row['decades_1_99']:9.2f}  {fit}")
    print(f"{time.perf_counter() - tic:.1f} s; results in {out}/ (gates.json, gates.png)")
    return 0


def add_command(sub) -> None:
    p = sub.add_parser("gates", help="histograms of a trained gated cell's multiscale steps (LEM: Δt_n, Δt̄_n)")
    p.add_argument("--run", dest="run_dir", required=True,
                   help="an `odelab fit` run folder (results.json, checkpoint.pt) of a one-layer odelab cell")
    p.add_argument("--sequences", type=arguments.integer(1), default=64,
                   help="test sequences read (>= 1, default 64)")
    p.add_argument("--marks", help="comma-separated step sizes drawn as vertical lines (e.g. the true time scales)")
    p.add_argument("--out", help="output folder (default: the run folder)")
    p.set_defaults(run=cmd_gates)
