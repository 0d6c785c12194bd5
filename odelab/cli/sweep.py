"""``odelab sweep TASK --model M --vary KEY=V1,V2,...``: the test metric against one model keyword or task option,
over seeds (``odelab.training.sweep``).

    odelab sweep fhn --model lem --vary dt=0.25,0.5,1,2 [--seeds 3] [--preset quick] [--jobs 2] [--out runs/sweep]
"""
from __future__ import annotations

import argparse
import sys

import torch

from ..data.tasks import TASKS
from ..models import cells
from ..training import FitError
from ..training import reproduce as tables
from ..training.sweep import __doc__ as SWEEP_DOC
from ..training.sweep import sweep
from . import arguments


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.model not in cells.PRESETS:
        args.error(f"--model: unknown model {args.model!r}; choose from {', '.join(sorted(cells.PRESETS))}")
    try:
        model_options = cells.preset_keywords(args.model, args.model_option)
    except ValueError as err:
        args.error(f"--model-option: {err}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        options = tables.parse_options(args.task, args.option)
        sweep(args.task, args.model, args.vary, args.preset, args.epochs, args.seed, args.seeds, options,
              model_options, args.out, args.device, args.jobs, args.threads, not args.no_progress)
    except FitError as err:
        print(f"odelab sweep: {err}", file=sys.stderr)
        return err.code
    return 0


def add_command(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="the test metric against one model keyword or task option, over seeds",
                              description=SWEEP_DOC.split("\n\n")[0])
    p.add_argument("task", choices=sorted(TASKS), metavar="TASK", help=f"one of {', '.join(sorted(TASKS))}")
    p.add_argument("--model", default="lem", help="a preset of odelab.cells (default lem)")
    p.add_argument("--vary", required=True, metavar="KEY=V1,V2,...",
                   help="a model keyword (dt, min_gate, chrono, tau, ...) or a task option (length, noise, ...) and "
                        "its values")
    p.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a model keyword kept fixed (repeatable)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a task option kept fixed (repeatable), e.g. --option noise=0")
    p.add_argument("--preset", default="quick", help="the task preset (default quick)")
    p.add_argument("--epochs", type=arguments.integer(1), help="override the preset's epochs (>= 1)")
    p.add_argument("--seed", type=arguments.seed, default=1234, help="first data and initialisation seed")
    p.add_argument("--seeds", type=arguments.integer(1), default=1, help="seeds per value (>= 1; mean ± std)")
    p.add_argument("--device", type=arguments.device, default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--threads", type=arguments.integer(1), help="CPU threads per process (>= 1)")
    p.add_argument("--jobs", type=arguments.integer(1), default=1, help="runs trained at once, each in its own process")
    p.add_argument("--out", default="runs/sweep", help="runs, JSON and figure (default runs/sweep)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, non-interactive runs)")
    p.set_defaults(run=cmd_sweep, error=p.error)
