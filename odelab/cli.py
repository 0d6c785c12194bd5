"""The ``odelab`` command.

    odelab fit fhn --model lem [--preset quick|paper] [--epochs N] [--seed S] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from . import cells
from .tasks import TASKS, linear_extrapolation_rmse
from .train import NonFiniteLoss, SequenceRegressor, TrainConfig, fit, write_results


def build_model(name: str, input_size: int, hidden_size: int, output_size: int) -> SequenceRegressor:
    if name not in cells.PRESETS:
        raise SystemExit(f"odelab: unknown model {name!r}; choose from {', '.join(sorted(cells.PRESETS))}")
    return SequenceRegressor(cells.PRESETS[name](input_size, hidden_size), hidden_size, output_size)


def cmd_fit(args: argparse.Namespace) -> int:
    task = TASKS[args.task]
    preset = dict(task.presets[args.preset])
    hidden = args.hidden or task.hidden.get(args.model, preset.pop("hidden_size"))
    preset.pop("hidden_size", None)
    overrides = {k: getattr(args, k) for k in ("epochs", "lr", "batch_size", "clip") if getattr(args, k) is not None}
    config = TrainConfig(**{**preset, **overrides}, seed=args.seed, device=args.device)
    out = Path(args.out or f"runs/{args.task}-{args.model}")
    out.mkdir(parents=True, exist_ok=True)

    print(f"odelab fit {args.task}: model {args.model}, hidden {hidden}, preset {args.preset}, "
          f"{config.epochs} epochs, seed {config.seed}, device {config.device}", flush=True)
    tic = time.perf_counter()
    data = task.load(config.seed, solver=args.data_solver)
    print(f"data: {', '.join(f'{k} {tuple(v[0].shape)}' for k, v in data.items())} "
          f"({time.perf_counter() - tic:.1f} s)", flush=True)
    torch.manual_seed(config.seed)
    model = build_model(args.model, task.input_size, hidden, task.output_size)
    try:
        result = fit(model, data, config, out_dir=out, resume=args.resume, progress=not args.no_progress)
    except NonFiniteLoss as err:
        print(f"odelab: training stopped: {err}", file=sys.stderr)
        return 1
    baseline = linear_extrapolation_rmse(*data["test"])
    result.update(task=args.task, model=args.model, hidden_size=hidden, preset=args.preset,
                  parameters=sum(p.numel() for p in model.parameters()), data_solver=args.data_solver,
                  linear_extrapolation_rmse=baseline, wall_seconds=time.perf_counter() - tic,
                  test_sequences=int(data["test"][0].shape[0]))
    write_results(result, out)
    model.cpu()
    from .plots import plot_curves, plot_predictions

    title = f"{args.task}: {args.model} (test RMSE {result['test_rmse']:.2e})"
    plot_predictions(model, *data["test"], out / "predictions.png", dt=task.sample_dt, title=title)
    plot_curves(result["history"], out / "curves.png", title=title)
    print(f"\n{'':24s}{'RMSE':>12s}\n{'test (' + str(result['test_sequences']) + ' sequences)':24s}"
          f"{result['test_rmse']:12.4e}\n{'validation (best)':24s}{result['valid_rmse']:12.4e}\n"
          f"{'linear extrapolation':24s}{baseline:12.4e}\n"
          f"best epoch {result['best_epoch']}, {result['parameters']} parameters, {result['wall_seconds']:.0f} s; "
          f"results in {out}/ (results.json, curves.csv, predictions.png, curves.png)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="odelab", description="Continuous-time neural ODE/DDE sequence models.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fit", help="train a model on a task")
    p.add_argument("task", choices=sorted(TASKS))
    p.add_argument("--model", default="lem", help=f"one of: {', '.join(sorted(cells.PRESETS))}")
    p.add_argument("--preset", default="quick", help="quick (a few minutes, the default) or paper (the full protocol)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--clip", type=float, help="gradient-norm clipping")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-solver", default="odelab", choices=["odelab", "paper-exact"],
                   help="generate data with odelab's batched solver (tight tolerance) or the official scipy recipe")
    p.add_argument("--out", help="output folder (default runs/TASK-MODEL)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    p.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "fit":
        if args.preset not in TASKS[args.task].presets:
            parser.error(f"--preset: choose from {', '.join(TASKS[args.task].presets)}")
        return cmd_fit(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
