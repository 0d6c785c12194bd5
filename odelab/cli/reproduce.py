"""``odelab reproduce TASK``: the models of a paper's table under its protocol, over seeds
(``odelab.training.reproduce``); ``odelab reproduce --report``: every table as one markdown report
(``odelab.training.report``)."""
from __future__ import annotations

import argparse
import sys

import torch

from ..data.tasks import TASKS
from ..models import cells
from ..training import FitError
from ..training import report as reports
from ..training import reproduce as tables
from . import arguments


def cmd_reproduce(args: argparse.Namespace) -> int:
    if args.report:
        if args.task is not None:
            args.error("--report collects every table in --out; give no TASK with it")
        try:
            text = reports.report(args.out, args.figures, args.readme)
        except (FileNotFoundError, ValueError) as err:
            print(f"odelab reproduce --report: {err}", file=sys.stderr)
            return 2
        print(text)
        print(f"written {args.out}/REPORT.md" + (f" and the section of {args.readme}" if args.readme else ""))
        return 0
    if args.task is None:
        args.error(f"give a TASK ({', '.join(tables.available())}) or --report")
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
        options = tables.parse_options(args.task, args.option)
        tables.reproduce(args.task, models, args.epochs, args.preset, args.seed, args.out, not args.no_progress,
                         seeds=args.seeds, options=options, device=args.device, jobs=args.jobs,
                         threads=args.threads)
    except FitError as err:
        print(f"odelab reproduce: {err}", file=sys.stderr)
        return err.code
    return 0


def add_command(subparsers) -> None:
    tasks = tables.available()
    p = subparsers.add_parser("reproduce", help="run the paper's table for a task over seeds and print ours next to "
                              "theirs; --report: every table as one markdown report",
                              description=tables.__doc__.split("\n\n")[1])
    p.add_argument("task", nargs="?", choices=tasks, metavar="TASK", help=f"one of {', '.join(tasks)}")
    p.add_argument("--models", help="comma-separated subset (default: the paper's table and our extra models)")
    p.add_argument("--epochs", type=arguments.integer(1),
                   help="override the paper's epoch count (>= 1; a shortened reproduction, labelled in the report)")
    p.add_argument("--preset", default="paper", help="the task preset to run (default: paper); per task: " + "; ".join(
        f"{name}: {', '.join(TASKS[name].presets)}" for name in tasks)
        + " (official-cuda: the official LEM_cuda example settings)")
    p.add_argument("--seed", type=arguments.seed, default=tables.DEFAULT_SEED,
                   help="first data and initialisation seed (0 … 2^32 − 1)")
    p.add_argument("--seeds", type=arguments.integer(1), default=1,
                   help="number of seeds: SEED, SEED + 1, … (>= 1; the table reports mean ± std)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a task option (repeatable), e.g. --option noise=0 for frequency, --option horizon=10")
    p.add_argument("--device", type=arguments.device, default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--threads", type=arguments.integer(1), help="CPU threads per process (>= 1)")
    p.add_argument("--jobs", type=arguments.integer(1), default=1,
                   help="runs trained at once, each in its own process (>= 1; default 1): their progress bars are "
                        "off, what each prints goes to its folder's output.log, a line reports each finished run; the "
                        "results are those of one run after another")
    p.add_argument("--out", default="runs/reproduce", help="runs and tables (default runs/reproduce)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, non-interactive runs)")
    p.add_argument("--report", action="store_true",
                   help="write OUT/REPORT.md and a figure per task from every OUT/TASK.json (no training)")
    p.add_argument("--figures", help="--report: folder of the figures (default OUT/figures)")
    p.add_argument("--readme", help="--report: also replace the README's section between "
                   f"{reports.BEGIN} and {reports.END}")
    p.set_defaults(run=cmd_reproduce, error=p.error)
