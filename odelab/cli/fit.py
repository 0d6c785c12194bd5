"""``odelab fit TASK --model M``: train a model on a task (``odelab.training.run_fit``).

    odelab fit TASK --model M [--preset quick|paper] [--epochs N] [--seed S] [--device cuda] [--out DIR]
               [--model-option KEY=VALUE ...]   (e.g. --model-option dt=0.1 --model-option gamma=2)
    odelab fit csv --csv PATH [--columns A,B] [--horizon H] [--window W]
    torchrun --nproc_per_node=N -m odelab fit TASK ...     (data-parallel: gloo on CPU, nccl on CUDA)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from ..data.tasks import TASKS, Task
from ..models import cells
from ..training import FitError, FitSpec, run_fit
from ..training.distributed import init_distributed, rank_and_world

TASK_OPTIONS = ("data_solver", "length", "csv", "columns", "horizon", "window")  # argparse dests of task options


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
    try:
        model_options = cells.preset_keywords(args.model, args.model_option)
    except ValueError as err:
        args.error(f"--model-option: {err}")
    if args.threads is not None:
        if args.threads < 1:
            args.error(f"--threads: expected a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    spec = FitSpec(args.task, args.model, args.preset, hidden=args.hidden, epochs=args.epochs, lr=args.lr,
                   batch_size=args.batch_size, clip=args.clip, seed=args.seed, model_options=model_options,
                   data_options=load_options(task, args), out=Path(args.out or f"runs/{args.task}-{args.model}"),
                   resume=args.resume, progress=not args.no_progress)
    try:
        spec.check()
        spec.device = init_distributed(args.device)
        run_fit(spec)
    except FitError as err:
        if rank_and_world()[0] == 0:
            print(f"odelab: {err}", file=sys.stderr)
        return err.code
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def add_command(subparsers) -> None:
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
