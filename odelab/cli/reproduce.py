"""``odelab reproduce TASK``: the models of a paper's table under its protocol (``odelab.training.reproduce``)."""
from __future__ import annotations

import argparse
import sys

import torch

from ..training import FitError
from ..training import reproduce as tables


def cmd_reproduce(args: argparse.Namespace) -> int:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    models = args.models.split(",") if args.models else None
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
    p.add_argument("--epochs", type=int, help="override the paper's epoch count (a shorter reproduction)")
    p.add_argument("--preset", default="paper", help="the task preset to run (default: paper; fhn also has "
                                                     "official-cuda, the official LEM_cuda example settings)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int)
    p.add_argument("--out", default="runs/reproduce")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=cmd_reproduce)
