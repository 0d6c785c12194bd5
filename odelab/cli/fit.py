"""``odelab fit TASK --model M``: train a model on a task (``odelab.training.run_fit``).

    odelab fit TASK --model M [--preset quick|paper] [--epochs N] [--seed S] [--device cuda] [--out DIR]
               [--model-option KEY=VALUE ...]   (e.g. --model-option dt=0.1 --model-option gamma=2)
    odelab fit csv --csv PATH [--columns A,B] [--time COLUMN] [--strict] [--missing previous|linear] [--encoding E]
                   [--difference] [--horizon H] [--window W]
    odelab fit enso|mackey-glass [--horizon H] [--stride K]     odelab fit adding|copy [--length N]
    odelab fit frequency [--noise SIGMA]       (frequency, copy: classification, accuracy and cross-entropy)
    odelab fit spiral|duffing [--reading ours|official] [--valid-window N]
    odelab fit smnist|psmnist --data-root PATH [--train-size N]   (the MNIST IDX files; nothing is downloaded)
    odelab fit eigenworms --data-root PATH [--length N] [--stride K]   (the UEA EigenWorms files)
    odelab fit person-activity --data-root PATH   (UCI's ConfLongDemo_JSI.txt; irregular: the cells step by the gaps)
    odelab fit har2 --data-root PATH   (the UCI HAR Dataset folder; 2 classes, τ-GRU paper's HAR-2)
    odelab fit bidmc-hr|bidmc-rr|bidmc-spo2 --data-root PATH [--length N] [--stride K] [--standardise]
               (the regression archive's BIDMC32HR/RR/SpO2 .ts files; one target per window)
    odelab fit imdb --data-root PATH [--vocabulary V] [--length N] [--glove FILE] [--train-size N]
               (aclImdb/ or Keras' imdb.npz; token ids, the sentiment at the last step)
    odelab fit ncifar|scifar --data-root PATH [--train-size N] [--padding-noise gaussian|uniform]
               (cifar-10-batches-py; nCIFAR's 968 noise rows are appended by the model)
    odelab fit google12 --data-root PATH [--train-size N]   (Speech Commands v0.02; features cached on first use)
    odelab fit ptb-char|ptb-word --data-root PATH [--length L] [--train-size N]
               (Mikolov's PTB files; stateful truncated BPTT, bits per character / perplexity)
    torchrun --nproc_per_node=N -m odelab fit TASK ...     (data-parallel: gloo on CPU, nccl on CUDA)

Every number is checked by argparse; the model, its options and the preset are checked before any data is
loaded; errors a user can fix are one line on stderr with exit code 2 (1: training failed, 130: Ctrl-C, the
last checkpoint kept for ``--resume``).
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
from ..training.loop import OPTIMIZERS
from . import arguments

# argparse dests of task options
TASK_OPTIONS = ("data_solver", "length", "csv", "columns", "horizon", "window", "strict", "encoding", "difference",
                "missing", "time", "stride", "noise", "reading", "valid_window", "data_root", "train_size",
                "standardise", "vocabulary", "glove", "padding_noise")


def load_options(task: Task, args: argparse.Namespace) -> dict:
    """The keywords of ``task.load`` set on the command line (unset ones keep the loader's defaults)."""
    options = {key: getattr(args, dest) for key, dest in task.options.items() if getattr(args, dest) is not None}
    if "columns" in options:
        options["columns"] = [c.strip() for c in options["columns"].split(",") if c.strip()]
        if not options["columns"]:
            args.error("--columns: expected comma-separated column names")
    return options


def preset_help() -> str:
    names = sorted({p for task in TASKS.values() for p in task.presets})
    per_task = "; ".join(f"{name}: {', '.join(task.presets)}" for name, task in sorted(TASKS.items()))
    return (f"hyperparameter preset, one of {', '.join(names)} (default quick: a few minutes on 2 CPU cores; "
            f"paper: the paper's protocol). Per task: {per_task}")


def cmd_fit(args: argparse.Namespace) -> int:
    task = TASKS[args.task]
    for dest in TASK_OPTIONS:
        if getattr(args, dest) is not None and dest not in task.options.values():
            users = sorted(name for name, t in TASKS.items() if dest in t.options.values())
            args.error(f"--{dest.replace('_', '-')}: only for the task(s) {', '.join(users)}")
    if args.task == "csv" and args.csv is None:
        args.error("--csv: the csv task needs --csv PATH")
    if "data_root" in task.options.values() and args.data_root is None:
        args.error(f"--data-root: the {args.task} task reads its files from a local folder: --data-root PATH "
                   "(nothing is downloaded)")
    if args.preset not in task.presets:
        args.error(f"--preset: the task {args.task} has the preset(s) {', '.join(task.presets)}, not {args.preset!r}")
    try:
        model_options = cells.preset_keywords(args.model, args.model_option)
    except ValueError as err:
        args.error(f"--model-option: {err}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    spec = FitSpec(args.task, args.model, args.preset, hidden=args.hidden, epochs=args.epochs, lr=args.lr,
                   batch_size=args.batch_size, clip=args.clip, seed=args.seed, model_options=model_options,
                   lr_milestones=tuple(args.lr_milestones) if args.lr_milestones else None, lr_gamma=args.lr_gamma,
                   weight_decay=args.weight_decay, optimizer=args.optimizer,
                   data_options=load_options(task, args), out=Path(args.out or f"runs/{args.task}-{args.model}"),
                   resume=args.resume, progress=not args.no_progress, engine=args.engine,
                   embedding_size=args.embedding_size, input_dropout=args.input_dropout,
                   output_dropout=args.output_dropout, patience=args.patience)
    try:
        spec.check()
        spec.device = init_distributed(args.device)
        run_fit(spec)
        if dist.is_initialized():  # every rank done before any tears down: rank 0 hosts the rendezvous store, and a
            dist.barrier()         # rank still leaving when it closes aborted ("terminate called", 1 run in 12)
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
    p.add_argument("--model", default="lem", choices=sorted(cells.PRESETS), metavar="MODEL",
                   help=f"one of: {', '.join(sorted(cells.PRESETS))} (default lem)")
    p.add_argument("--preset", default="quick", help=preset_help())
    p.add_argument("--epochs", type=arguments.integer(1),
                   help="training epochs (>= 1; default: the preset's); with --resume a finished run is extended")
    p.add_argument("--lr", type=arguments.positive_float, help="learning rate (> 0; default: the preset's)")
    p.add_argument("--batch-size", type=arguments.integer(1),
                   help="global batch size (>= 1; split across processes under torchrun)")
    p.add_argument("--hidden", type=arguments.integer(1), help="hidden size (>= 1; default: the preset's)")
    p.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword of the model's constructor, e.g. dt=0.1 or gamma=2 (repeatable)")
    p.add_argument("--clip", type=arguments.positive_float, help="gradient-norm clipping (> 0)")
    p.add_argument("--patience", type=arguments.integer(1), metavar="N",
                   help="early stopping: end the run once N epochs in a row gave no better validation score (the "
                        "best epoch is kept either way; default: never)")
    p.add_argument("--input-dropout", type=arguments.fraction(closed_upper=False), metavar="P",
                   help="dropout on what the model reads (a token task's embeddings), one mask per sequence shared "
                        "over time (default: the preset's, mostly 0)")
    p.add_argument("--output-dropout", type=arguments.fraction(closed_upper=False), metavar="P",
                   help="dropout on the recurrent outputs before the readout, likewise")
    p.add_argument("--embedding-size", type=arguments.integer(1),
                   help="token tasks: the embedding's width (default: the preset's, or the pretrained vectors')")
    p.add_argument("--lr-milestones", type=arguments.integer(1), nargs="+", metavar="EPOCH",
                   help="step decay: from each of these epochs (0-based, increasing) on, the rate is multiplied by "
                        "--lr-gamma (the papers' 'lr / 10 after epoch 90': --lr-milestones 90)")
    p.add_argument("--lr-gamma", type=arguments.positive_float, help="the step decay's factor (default 0.1)")
    p.add_argument("--weight-decay", type=float, help="the optimizer's L2 penalty λ (>= 0; default 0)")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS),
                   help="adam, rmsprop (torch's defaults: ρ 0.99, ε 1e-8) or rmsprop-keras (Keras': ρ 0.9, ε 1e-7, the "
                        "LRC code's); default: the preset's")
    p.add_argument("--seed", type=arguments.seed, default=1234, help="data and initialisation seed (0 … 2^32 − 1)")
    p.add_argument("--device", type=arguments.device, default="cpu",
                   help="cpu, cuda or cuda:N (under torchrun: cuda:LOCAL_RANK)")
    p.add_argument("--threads", type=arguments.integer(1),
                   help="CPU threads per process (torch.set_num_threads); 1 is often fastest "
                        "for small recurrent models on a busy machine")
    p.add_argument("--out", help="output folder (default runs/TASK-MODEL)")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/checkpoint.pt; any changed setting (data, model, options, hidden size, "
                        "horizon, preset, seed, lr, ...) is refused, a larger --epochs extends a finished run")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, non-interactive runs)")
    p.add_argument("--engine", default="auto", choices=["auto", "generic", "fused", "cuda-graph"],
                   help="how the cells run: a fused kernel where one exists (auto), the Python loop over the scheme "
                        "(generic, the definition), a kernel or an error (fused), CUDA graphs (cuda-graph)")
    task = p.add_argument_group("task options")
    task.add_argument("--data-solver", choices=["odelab", "paper-exact"],
                      help="fhn: generate data with odelab's batched solver (default, tight tolerance) or the "
                           "official scipy recipe")
    task.add_argument("--length", type=arguments.integer(2),
                      help="adding: sequence length N (>= 2, default 2000); copy: the delay T over which the 10 "
                           "symbols are remembered (>= 2, default 1000; sequences of T + 20 steps); eigenworms: "
                           "keep the first N steps (default all 17 984); bidmc-*: likewise (default all 4000); imdb: "
                           "the last N tokens of each review, pre-padded with 0 (default 256); ptb-char, ptb-word: "
                           "the window, the steps of truncated back-propagation (default 150 / 70)")
    task.add_argument("--noise", type=arguments.non_negative_float,
                      help="frequency: standard deviation σ of the Gaussian noise added to each sample (>= 0, "
                           "default 0.1; the paper: 0 and 0.1)")
    task.add_argument("--csv", help="csv: path of the CSV file (header row, one row per time step; the delimiter "
                                    ", ; tab or | is sniffed)")
    task.add_argument("--data-root", help="smnist, psmnist: folder with the MNIST IDX files train-images-idx3-ubyte, "
                                          "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte "
                                          "(each plain or .gz) in it, in raw/ or in MNIST/raw/; eigenworms: the UEA "
                                          "EigenWorms_TRAIN/_TEST .ts (or .arff) files; bidmc-hr, bidmc-rr, "
                                          "bidmc-spo2: the regression archive's BIDMC32HR_TRAIN/_TEST .ts files "
                                          "(BIDMC32RR_…, BIDMC32SpO2_…; also in BIDMC32HR/, raw/BIDMC32HR/, raw/); "
                                          "person-activity: UCI's "
                                          "ConfLongDemo_JSI.txt; har2: the UCI HAR Dataset folder (or its "
                                          "parent); imdb: the aclImdb folder (or its parent) or Keras' imdb.npz "
                                          "(or its folder); ncifar, scifar: the cifar-10-batches-py folder (or its "
                                          "parent); google12: the extracted Speech Commands v0.02 folder; ptb-char, "
                                          "ptb-word: Mikolov's simple-examples folder (or its data/); never downloaded")
    task.add_argument("--train-size", type=arguments.integer(1),
                      help="smnist, psmnist: train on this many of the 57 000 training images (a random subset; "
                           "default all); imdb: of the 17 500 training reviews; ncifar, scifar: of the 48 000 "
                           "training images; google12: of the training clips; ptb-char, ptb-word: the first N "
                           "training windows; validation and test stay whole")
    task.add_argument("--padding-noise", choices=["gaussian", "uniform"],
                      help="ncifar: the 968 padding rows, one fixed draw of N(0, 1) (the official code, default) or "
                           "U[0, 1) (the thesis' \"uniform random numbers\")")
    task.add_argument("--vocabulary", type=arguments.integer(3),
                      help="imdb: token ids in all, padding (0) and out-of-vocabulary (1) included: the "
                           "vocabulary − 2 most frequent training words (>= 3, default 25 000 as coRNN; LRC: 20 000)")
    task.add_argument("--glove", metavar="FILE",
                      help="imdb: a GloVe text file (e.g. glove.6B.100d.txt, plain or .gz; a relative path is also "
                           "looked up in --data-root): the embedding's pretrained vectors, frozen; never downloaded")
    task.add_argument("--standardise", action="store_true", default=None,
                      help="bidmc-hr, bidmc-rr, bidmc-spo2: train on the targets standardised with the training "
                           "split's mean and std (default: the raw values, as the papers' code; results.json adds "
                           "the test RMSE in the target's unit either way)")
    task.add_argument("--columns", help="csv: comma-separated columns to model (default: every numeric column "
                                        "but index/date-like ones; the columns left out are named)")
    task.add_argument("--strict", action="store_true", default=None,
                      help="csv: a numeric column with a missing or bad cell is an error instead of being left out "
                           "(on when --columns is given)")
    task.add_argument("--missing", choices=("error", "previous", "linear"), default=None,
                      help="csv: missing cells (empty, NA, nan, ...): error (default: a bad cell, as --strict "
                           "says), previous (the value above) or linear (interpolated between the values above and "
                           "below); the filled cells are data from then on, inputs, targets and test RMSE alike")
    task.add_argument("--time", metavar="COLUMN",
                      help="csv: the column of the rows' times (numbers, or ISO 8601 dates and times), in order "
                           "without repeats: each row's time to the next, in the training rows' median gaps, becomes "
                           "its last input feature; the continuous-time cells step by it (irregular sampling), the "
                           "others read it")
    task.add_argument("--encoding", type=arguments.encoding,
                      help="csv: the file's text encoding (default utf-8, a byte-order mark is dropped), "
                           "e.g. latin-1 or cp1252")
    task.add_argument("--difference", action="store_true", default=None,
                      help="csv: model the increments s[n+1] − s[n] (trending series); the per-column test RMSE "
                           "stays in the file's units")
    task.add_argument("--horizon", type=arguments.integer(1),
                      help="csv, enso, mackey-glass: forecast horizon H (>= 1, default 1: one step ahead; enso, "
                           "mackey-glass: H kept samples ahead, see --stride)")
    task.add_argument("--stride", type=arguments.integer(1),
                      help="enso, mackey-glass: keep every K-th sample of the series (>= 1, default 1: spacing 0.1 "
                           "for enso, 0.25 for mackey-glass, times K); eigenworms, bidmc-*: every K-th step (LEM's "
                           "and UnICORNN's Δt times K)")
    task.add_argument("--window", type=arguments.integer(2), help="csv: training window length (>= 2, default 64)")
    task.add_argument("--reading", choices=["ours", "official"],
                      help="spiral, duffing: ours (default: held-out trajectories, test MSE) or official (the authors' "
                           "one trajectory and parameters, test read with their L1 / MAE)")
    task.add_argument("--valid-window", type=arguments.integer(2),
                      help="spiral, duffing with --reading official: samples of each of the 256 validation windows "
                           "of the trajectory (>= 2, default 16 as the training windows; e.g. 250: open-loop "
                           "rollouts long enough to select the epoch whose 1000-step rollout stays in phase)")
    p.set_defaults(run=cmd_fit, error=p.error)
