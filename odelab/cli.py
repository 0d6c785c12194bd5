"""The ``odelab`` command.

    odelab fit TASK --model M [--preset quick|paper] [--epochs N] [--seed S] [--device cuda] [--out DIR]
               [--model-option KEY=VALUE ...]   (e.g. --model-option dt=0.1 --model-option gamma=2)
    odelab fit csv --csv PATH [--columns A,B] [--horizon H] [--window W]
    torchrun --nproc_per_node=N -m odelab fit TASK ...     (data-parallel: gloo on CPU, nccl on CUDA)
    odelab compare-schemes --task fhn --model lem [--quick] [--run DIR]   (odelab.analysis.commands)
    odelab stability [--study all] [--model lem,cornn] [--steps N]
    odelab reproduce fhn|enso|mackey-glass [--models lem,lstm] [--epochs N]   (odelab.reproduce)

Each subcommand is one ``add_*_command(subparsers)`` function that registers its parser and sets
``run=cmd_*``; ``main`` only parses and dispatches.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from . import cells
from .analysis.commands import add_analysis_commands
from .reproduce import add_reproduce_command
from .tasks import TASKS, Task, settings
from .train import NonFiniteLoss, SequenceRegressor, TrainConfig, fit, predict, rank_and_world, write_results

TASK_OPTIONS = ("data_solver", "length", "csv", "columns", "horizon", "window")  # argparse dests of task options


def build_model(name: str, input_size: int, hidden_size: int, output_size: int, last: bool = False,
                **options) -> SequenceRegressor:
    if name not in cells.PRESETS:
        raise SystemExit(f"odelab: unknown model {name!r}; choose from {', '.join(sorted(cells.PRESETS))}")
    return SequenceRegressor(cells.PRESETS[name](input_size, hidden_size, **options), hidden_size, output_size, last)


def parse_model_options(model: str, items: list[str]) -> dict:
    """``--model-option KEY=VALUE`` pairs -> keywords of the model's constructor (:func:`cells.preset_keywords`)."""
    try:
        return cells.preset_keywords(model, items)
    except ValueError as err:
        raise SystemExit(f"odelab: --model-option: {err}") from None


def init_distributed(device: str) -> str:
    """Join the process group torchrun describes (WORLD_SIZE > 1): nccl on CUDA, gloo on CPU. Returns the
    device of this rank (cuda:LOCAL_RANK for CUDA)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return device
    cuda = device.startswith("cuda")
    if cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    return device


def load_options(task: Task, args: argparse.Namespace) -> dict:
    """The keywords of ``task.load`` set on the command line (unset ones keep the loader's defaults)."""
    options = {key: getattr(args, dest) for key, dest in task.options.items() if getattr(args, dest) is not None}
    if "columns" in options:
        options["columns"] = [c.strip() for c in options["columns"].split(",") if c.strip()]
    return options


def cmd_fit(args: argparse.Namespace) -> int:
    task = TASKS[args.task]
    for dest in TASK_OPTIONS:
        if getattr(args, dest) is not None and dest not in task.options.values():
            users = sorted(name for name, t in TASKS.items() if dest in t.options.values())
            args.error(f"--{dest.replace('_', '-')}: only for the task(s) {', '.join(users)}")
    if args.task == "csv" and args.csv is None:
        args.error("--csv: the csv task needs --csv PATH")
    if args.preset not in task.presets:
        args.error(f"--preset: choose from {', '.join(task.presets)}")
    preset = settings(task, args.preset, args.model)
    preset_hidden = preset.pop("hidden_size")
    hidden = args.hidden or preset_hidden
    args.model_options = parse_model_options(args.model, args.model_option)
    overrides = {k: getattr(args, k) for k in ("epochs", "lr", "batch_size", "clip") if getattr(args, k) is not None}
    if args.threads is not None:
        if args.threads < 1:
            args.error(f"--threads: expected a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = init_distributed(args.device)
    try:
        return _fit(task, args, hidden, TrainConfig(**{**preset, **overrides}, seed=args.seed, device=device))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _fit(task: Task, args: argparse.Namespace, hidden: int, config: TrainConfig) -> int:
    rank, world = rank_and_world()
    say = print if rank == 0 else (lambda *a, **k: None)
    out = Path(args.out or f"runs/{args.task}-{args.model}")
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    options = load_options(task, args)
    say(f"odelab fit {args.task}: model {args.model}, hidden {hidden}, preset {args.preset}, {config.epochs} epochs, "
        f"seed {config.seed}, device {config.device}" + (f", {world} processes" if world > 1 else ""), flush=True)
    tic = time.perf_counter()
    try:
        if rank != 0:
            dist.barrier()  # rank 0 generates and caches the data first
        data = task.load(config.seed, **options)
        if rank == 0 and world > 1:
            dist.barrier()
    except (ValueError, FileNotFoundError) as err:
        print(f"odelab: {err}", file=sys.stderr)
        return 2
    splits = {k: data[k] for k in ("train", "valid", "test")}
    say(f"data: {', '.join(f'{k} {tuple(v[0].shape)}' for k, v in splits.items())} "
        f"({time.perf_counter() - tic:.1f} s)", flush=True)
    x_test, y_test = splits["test"]
    torch.manual_seed(config.seed)
    model_options = {**task.model_options(args.model, options), **args.model_options}
    try:
        model = build_model(args.model, x_test.shape[-1], hidden, y_test.shape[-1], task.target == "last",
                            **model_options)
    except (TypeError, ValueError) as err:
        print(f"odelab: {args.model} with options {model_options}: {err}", file=sys.stderr)
        return 2
    try:
        result = fit(model, splits, config, out_dir=out, resume=args.resume, progress=not args.no_progress)
    except NonFiniteLoss as err:
        if rank == 0:
            print(f"odelab: training stopped: {err}", file=sys.stderr)
        return 1
    except ValueError as err:  # a checkpoint that does not match these settings
        print(f"odelab: {err}", file=sys.stderr)
        return 2
    if rank == 0:
        _report(task, args, model, data, result, hidden, options, model_options, out, time.perf_counter() - tic)
    return 0


def _report(task: Task, args, model, data: dict, result: dict, hidden: int, options: dict, model_options: dict,
            out: Path, wall: float) -> None:
    """results.json, curves.csv, the PNGs and the terminal table (rank 0)."""
    from .plots import plot_curves, plot_forecast, plot_phase, plot_predictions, plot_scatter

    x_test, y_test = data["test"]
    baselines = {name: baseline(data) for name, baseline in task.baselines.items()}
    result.update(task=args.task, model=args.model, hidden_size=hidden, preset=args.preset, target=task.target,
                  parameters=sum(p.numel() for p in model.parameters()), data_options=options,
                  model_options=model_options, baselines=baselines,
                  wall_seconds=wall, test_sequences=int(x_test.shape[0]))
    model.cpu()
    if "meta" in data:
        result["data"] = data["meta"]
    if task.report is not None:
        result.update(task.report(predict(model, x_test, result["config"]["eval_batch_size"], "cpu"), data))
    write_results(result, out)

    title = f"{args.task}: {args.model} (test RMSE {result['test_rmse']:.2e})"
    figure = "forecast.png" if task.plot == "forecast" else "predictions.png"
    if task.plot == "forecast":
        plot_forecast(model, x_test, y_test, data["meta"], out / figure, title=title)
    elif task.plot == "scatter":
        plot_scatter(model, x_test, y_test, out / figure, title=title)
    elif task.plot == "phase":
        plot_phase(model, x_test, y_test, out / figure, dt=task.sample_dt, title=title)
    else:
        plot_predictions(model, x_test, y_test, out / figure, dt=task.sample_dt, title=title)
    plot_curves(result["history"], out / "curves.png", title=title)

    rows = [(f"test ({result['test_sequences']} sequences)", result["test_rmse"]),
            ("validation (best)", result["valid_rmse"])] + [(f"baseline: {k}", v) for k, v in baselines.items()]
    width = max(len(name) for name, _ in rows) + 2
    print(f"\n{'':{width}s}{'RMSE':>12s}")
    for name, value in rows:
        print(f"{name:{width}s}{value:12.4e}")
    for column, values in result.get("test_rmse_by_column", {}).items():
        print(f"test RMSE of {column!r} in its own units: model {values['model']:.4g}, "
              f"persistence {values['persistence']:.4g}")
    print(f"best epoch {result['best_epoch']}, {result['parameters']} parameters, {wall:.0f} s; results in {out}/ "
          f"(results.json, curves.csv, {figure}, curves.png)")


def add_fit_command(subparsers) -> None:
    p = subparsers.add_parser("fit", help="train a model on a task",
                              description="Train a model on a task; results.json, curves.csv and PNGs go to --out.")
    p.add_argument("task", choices=sorted(TASKS))
    p.add_argument("--model", default="lem", help=f"one of: {', '.join(sorted(cells.PRESETS))}")
    p.add_argument("--preset", default="quick", help="quick (a few minutes, the default) or paper (the full protocol)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", type=int, help="global batch size (split across processes under torchrun)")
    p.add_argument("--hidden", type=int)
    p.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword of the model's constructor, e.g. dt=0.1 or gamma=2 (repeatable)")
    p.add_argument("--clip", type=float, help="gradient-norm clipping")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (under torchrun: cuda:LOCAL_RANK)")
    p.add_argument("--threads", type=int, help="CPU threads per process (torch.set_num_threads); 1 is often fastest "
                                               "for small recurrent models on a busy machine")
    p.add_argument("--out", help="output folder (default runs/TASK-MODEL)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    p.add_argument("--no-progress", action="store_true")
    task = p.add_argument_group("task options")
    task.add_argument("--data-solver", choices=["odelab", "paper-exact"],
                      help="fhn: generate data with odelab's batched solver (default, tight tolerance) or the "
                           "official scipy recipe")
    task.add_argument("--length", type=int, help="adding: sequence length N (default 2000)")
    task.add_argument("--csv", help="csv: path of the CSV file (header row, one row per time step)")
    task.add_argument("--columns", help="csv: comma-separated columns to model (default: all numeric columns)")
    task.add_argument("--horizon", type=int, help="csv: forecast horizon H (default 1: one step ahead)")
    task.add_argument("--window", type=int, help="csv: training window length (default 64)")
    p.set_defaults(run=cmd_fit, error=p.error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="odelab", description="Continuous-time neural ODE/DDE sequence models.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_fit_command(subparsers)
    add_analysis_commands(subparsers)
    add_reproduce_command(subparsers)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
