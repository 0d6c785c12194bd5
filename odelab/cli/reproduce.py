"""``odelab reproduce TASK``: the models of a paper's table under its protocol (``odelab.training.reproduce``)."""
from __future__ import annotations

import argparse
import sys

import torch

from ..data.tasks import TASKS
from ..models import cells
from ..training import FitError
from ..training import reproduce as tables
from . import arguments


def cmd_reproduce(args: argparse.Namespace) -> int:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    unknown = [m for m in models or [] if m not in cells.PRESETS]
    if unknown:
        args.error(f"--models: unknown model(s) {', '.join(unknown)}; choose from {', '.join(sorted(cells.PRESETS))}")
    if args.preset not in TASKS[args.task].presets:
        args.error(f"--preset: the task {args.task} has the preset(s) {', '.join(TASKS[args.task].presets)}, "
                   f"not {args.preset!r}")
    try:
        tables.reproduce(args.task, models, args.epochs, args.preset, args.seed, args.out, not args.no_progress)
    except FitError as err:
        print(f"odelab reproduce: {err}", file=sys.stderr)
        return err.code
    return 0


def add_command(subparsers) -> None:
    p = subparsers.add_parser("reproduce", help="run the paper's table for a task and print ours next to theirs",
                              description=tables.__doc__.split("\n\n")[1])
    p.add_argument("task", choices=sorted(tables.PAPER))
    p.add_argument("--models", help="comma-separated subset (default: the paper's table plus lrcu-a, unicornn)")
    p.add_argument("--epochs", type=arguments.integer(1),
                   help="override the paper's epoch count (>= 1; a shorter reproduction)")
    p.add_argument("--preset", default="paper", help="the task preset to run (default: paper); per task: " + "; ".join(
        f"{name}: {', '.join(TASKS[name].presets)}" for name in sorted(tables.PAPER))
        + " (official-cuda: the official LEM_cuda example settings)")
    p.add_argument("--seed", type=arguments.seed, default=1234, help="data and initialisation seed (0 … 2^32 − 1)")
    p.add_argument("--threads", type=arguments.integer(1), help="CPU threads per process (>= 1)")
    p.add_argument("--out", default="runs/reproduce")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=cmd_reproduce, error=p.error)
