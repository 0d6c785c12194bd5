"""``odelab compare-schemes``: one trained model's vector field under every scheme and step, and retrained under
each (``odelab.analysis.schemes``).

    odelab compare-schemes --task fhn --model lem [--model-option KEY=VALUE] [--quick] [--run DIR | --checkpoint PATH]
                           [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ..analysis import schemes as scheme_analysis
from ..analysis.plots import plot_scheme_comparison
from ..data.tasks import TASKS, settings as task_settings
from ..models import cells
from ..solvers.schemes import FIXED_SCHEMES
from ..training import FitError, FitSpec, TrainConfig, build_regressor, model_keywords, run_fit
from ..training.run import accepted_options
from . import arguments, runs

# compare-schemes --quick: a few minutes on 2 CPU cores
QUICK = dict(length=200, train=128, valid=64, test=64, epochs=20, retrain_epochs=8, finest=8)


def _write(out: Path, name: str, result) -> None:
    (out / f"{name}.json").write_text(json.dumps(scheme_analysis.json_ready(result), indent=1))


def _load_data(task, seed: int, length: int | None, counts: dict | None, options: dict) -> dict:
    data = task.load(seed, **options)
    sequence = getattr(task, "target", "sequence") == "sequence"
    out = {}
    for split in ("train", "valid", "test"):
        x, y = data[split]
        if counts:
            x, y = x[:counts[split]], y[:counts[split]]
        if length and sequence:
            x, y = x[:, :length], y[:, :length]
        out[split] = (x.contiguous(), y.contiguous())
    return out


def _builder(task, model: str, input_size: int, hidden: int, output_size: int, seed: int, keywords: dict):
    def build():
        torch.manual_seed(seed)
        return build_regressor(task, model, input_size, hidden, output_size, keywords)

    return build


def cmd_compare_schemes(args: argparse.Namespace) -> int:
    task_name, model_name, hidden = args.task, args.model, args.hidden
    trained_model = saved_state = keywords = None
    seed, data_options, info = (1234 if args.seed is None else args.seed), {}, {}
    if args.run_dir:  # the run's model with its options (e.g. its Δt, which no state dict holds), on its data
        trained_model, info = runs.load_run(Path(args.run_dir), "compare-schemes")
        task_name, model_name, hidden = info["task"], info["model"], info["hidden_size"]
        keywords, data_options = info.get("model_options") or {}, info.get("data_options") or {}
        if args.seed is None:
            seed = info.get("config", {}).get("seed", seed)
    elif args.checkpoint:
        checkpoint = runs.load_state(Path(args.checkpoint), "compare-schemes")
        saved_state = checkpoint.get("model", checkpoint) if isinstance(checkpoint, dict) else checkpoint
        if isinstance(checkpoint, dict) and (checkpoint.get("best") or {}).get("state"):
            saved_state = checkpoint["best"]["state"]
        if not isinstance(saved_state, dict):
            raise SystemExit(f"odelab: --checkpoint: {args.checkpoint} holds no state dict")
    if task_name not in TASKS:
        raise SystemExit(f"odelab: --task: unknown task {task_name!r}; choose from {REGRESSION_TASKS}")
    if model_name not in cells.PRESETS:
        raise SystemExit(f"odelab: --model: unknown model {model_name!r}; choose from {sorted(cells.PRESETS)}")
    if task_name == "csv" or task_name not in REGRESSION_TASKS:
        raise SystemExit(f"odelab: --task: compare-schemes runs on the generated regression tasks "
                         f"({', '.join(t for t in REGRESSION_TASKS if t != 'csv')}), not {task_name}")
    task = TASKS[task_name]
    if args.run_dir and args.model_option:
        raise SystemExit("odelab: compare-schemes: --model-option: --run takes the run's model options")
    try:
        options = cells.preset_keywords(model_name, args.model_option)
    except ValueError as err:
        raise SystemExit(f"odelab: compare-schemes: --model-option: {err}") from None
    keywords = model_keywords(task, model_name, None, options) if keywords is None else keywords
    preset = task_settings(task, "quick", model_name)
    hidden = hidden or preset["hidden_size"]
    settings = dict(QUICK) if args.quick else dict(length=None, train=None, valid=None, test=None,
                                                   epochs=preset["epochs"], retrain_epochs=preset["epochs"], finest=8)
    for key in ("length", "epochs", "retrain_epochs", "finest"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    if args.sequences is not None:
        settings.update(train=args.sequences, valid=args.sequences, test=args.sequences)
    counts = None if settings["train"] is None else {k: settings[k] for k in ("train", "valid", "test")}
    out = Path(args.out or f"runs/compare-{task_name}-{model_name}")
    out.mkdir(parents=True, exist_ok=True)

    tic = time.perf_counter()
    try:
        data = _load_data(task, seed, settings["length"], counts, data_options)
    except (ValueError, OSError) as err:
        raise SystemExit(f"odelab: compare-schemes: {err}") from None
    x_train, y_train = data["train"]
    build = _builder(task, model_name, x_train.shape[-1], hidden, y_train.shape[-1], seed, keywords)
    try:
        model = build() if trained_model is None else trained_model
        scheme_analysis.recurrent_layers(model.body)
    except TypeError as err:  # a keyword the constructor does not take
        raise SystemExit(f"odelab: compare-schemes: {err}; {model_name} accepts: "
                         f"{', '.join(accepted_options(model_name))}") from None
    except ValueError as err:
        raise SystemExit(f"odelab: compare-schemes: {err}") from None
    train_fields = {k: v for k, v in preset.items() if k != "hidden_size"}  # lr, batch size, optimizer of the task
    config = TrainConfig(**{**train_fields, "epochs": settings["epochs"]}, seed=seed)
    print(f"odelab compare-schemes {task_name}: model {model_name}, hidden {hidden}, data "
          f"{', '.join(f'{k} {tuple(v[0].shape)}' for k, v in data.items())}", flush=True)
    if trained_model is not None:
        trained = {"source": str(args.run_dir), "test_rmse": info.get("test_rmse")}
    elif saved_state is not None:
        try:
            model.load_state_dict(saved_state)
        except (RuntimeError, ValueError, TypeError) as err:
            raise SystemExit(f"odelab: compare-schemes: {args.checkpoint} holds another model than "
                             f"{model_name} with hidden size {hidden} ({str(err).strip().splitlines()[0][:160]}); "
                             "give the run's --task, --model and --hidden") from None
        trained = {"source": str(args.checkpoint)}
    else:
        spec = FitSpec(task_name, model_name, "quick", hidden=hidden, epochs=settings["epochs"], seed=seed,
                       model_options=options, progress=False)
        try:
            model, fitted = run_fit(spec, data)
        except FitError as err:
            print(f"odelab compare-schemes: {err}", file=sys.stderr)
            return err.code
        trained = {"source": f"trained here, {config.epochs} epochs", "test_rmse": fitted["test_rmse"],
                   "train_seconds": fitted["train_seconds"]}
    schemes = args.schemes.split(",") if args.schemes else scheme_analysis.applicable_schemes(model.body)
    unknown = [s for s in schemes if s not in FIXED_SCHEMES]
    if unknown:
        raise SystemExit(f"odelab: --schemes: unknown {unknown}; choose from {sorted(FIXED_SCHEMES)}")
    evaluation = scheme_analysis.evaluate_trained(model, *data["test"], schemes=schemes, finest=settings["finest"])
    print(f"(a) evaluated under {', '.join(schemes)} ({time.perf_counter() - tic:.0f} s)", flush=True)
    training = None
    if not args.no_retrain:
        print(f"(b) retraining under each scheme, {settings['retrain_epochs']} epochs each", flush=True)
        retrain = TrainConfig(**{**train_fields, "epochs": settings["retrain_epochs"]}, seed=seed)
        training = scheme_analysis.train_under_schemes(build, data, retrain, schemes)
    result = {"task": task_name, "model": model_name, "hidden_size": hidden, "settings": settings, "trained": trained,
              "evaluation": evaluation, "training": training, "wall_seconds": time.perf_counter() - tic}
    _write(out, "compare_schemes", result)
    plot_scheme_comparison(evaluation, training, out / "compare_schemes.png",
                           title=f"{task_name}: {model_name} (trained with {evaluation['trained_scheme']})")
    print(scheme_analysis.format_table(evaluation, training))
    print(f"\n{result['wall_seconds']:.0f} s; results in {out}/ (compare_schemes.json, compare_schemes.png)")
    return 0


# errors of a trajectory, on a grid of one step (irregularly sampled tasks have none to refine)
REGRESSION_TASKS = sorted(name for name, task in TASKS.items() if task.loss == "mse" and not task.time_gaps)


def add_command(sub) -> None:
    p = sub.add_parser("compare-schemes", help="one trained model's vector field under every scheme and step")
    p.add_argument("--task", default="fhn", choices=REGRESSION_TASKS, metavar="TASK",
                   help=f"the task whose data the model is evaluated on: {', '.join(REGRESSION_TASKS)} (default fhn; "
                        "--run takes the run's task)")
    p.add_argument("--model", default="lem", choices=sorted(cells.PRESETS), metavar="MODEL",
                   help="a Recurrent-based preset (lem, cornn, unicornn, ltc, lrcu-a, ...; default lem)")
    p.add_argument("--quick", action="store_true",
                   help=f"tiny run of a few minutes: {QUICK}")
    p.add_argument("--run", dest="run_dir", help="load the trained model of an `odelab fit` run folder (results.json, "
                   "checkpoint.pt): its task, model, hidden size, model options and data")
    p.add_argument("--checkpoint", help="load a state dict or an odelab checkpoint for --task/--model/--hidden "
                   "(and --model-option)")
    p.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword of the model's constructor, e.g. dt=2 (repeatable; not with --run, which takes "
                        "the run's)")
    p.add_argument("--hidden", type=arguments.integer(1), help="hidden size (>= 1; default: the task's quick preset)")
    p.add_argument("--epochs", type=arguments.integer(1), help="epochs of the model evaluated in part (a) (>= 1)")
    p.add_argument("--retrain-epochs", type=arguments.integer(1), help="epochs per scheme in part (b) (>= 1)")
    p.add_argument("--no-retrain", action="store_true", help="skip part (b), retraining under each scheme")
    p.add_argument("--length", type=arguments.integer(2), help="truncate sequences to this many steps (>= 2)")
    p.add_argument("--sequences", type=arguments.integer(1), help="at most this many sequences per split (>= 1)")
    p.add_argument("--schemes", help="comma-separated subset of the applicable schemes")
    p.add_argument("--finest", type=arguments.power_of_two,
                   help="finest step = trained step / FINEST (a power of 2, default 8)")
    p.add_argument("--seed", type=arguments.seed,
                   help="data and initialisation seed (0 … 2^32 − 1; default 1234, with --run the run's)")
    p.add_argument("--out", help="output folder (default runs/compare-TASK-MODEL)")
    p.set_defaults(run=cmd_compare_schemes)
