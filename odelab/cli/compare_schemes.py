"""``odelab compare-schemes``: one trained model's vector field under every scheme and step, and retrained under
each (``odelab.analysis.schemes``).

    odelab compare-schemes --task fhn --model lem [--quick] [--run DIR | --checkpoint PATH] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ..analysis import schemes as scheme_analysis
from ..analysis.plots import plot_scheme_comparison
from ..data.tasks import TASKS, settings as task_settings
from ..models import cells
from ..solvers.schemes import FIXED_SCHEMES
from ..training import FitSpec, TrainConfig, build_regressor, model_keywords, run_fit

# compare-schemes --quick: a few minutes on 2 CPU cores
QUICK = dict(length=200, train=128, valid=64, test=64, epochs=20, retrain_epochs=8, finest=8)


def _write(out: Path, name: str, result) -> None:
    (out / f"{name}.json").write_text(json.dumps(scheme_analysis.json_ready(result), indent=1))


def _load_data(task, seed: int, length: int | None, counts: dict | None) -> dict:
    data = task.load(seed)
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


def _builder(task, model: str, input_size: int, hidden: int, output_size: int, seed: int):
    keywords = model_keywords(task, model)

    def build():
        torch.manual_seed(seed)
        return build_regressor(task, model, input_size, hidden, output_size, keywords)

    return build


def cmd_compare_schemes(args: argparse.Namespace) -> int:
    task_name, model_name, hidden = args.task, args.model, args.hidden
    saved_state = None
    if args.run_dir:
        run = Path(args.run_dir)
        info = json.loads((run / "results.json").read_text())
        task_name, model_name, hidden = info["task"], info["model"], info["hidden_size"]
        checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
        saved_state = (checkpoint.get("best") or {}).get("state") or checkpoint["model"]
    elif args.checkpoint:
        checkpoint = torch.load(args.checkpoint, weights_only=True)
        saved_state = checkpoint.get("model", checkpoint) if isinstance(checkpoint, dict) else checkpoint
        if isinstance(checkpoint, dict) and (checkpoint.get("best") or {}).get("state"):
            saved_state = checkpoint["best"]["state"]
    if task_name not in TASKS:
        raise SystemExit(f"odelab: --task: unknown task {task_name!r}; choose from {sorted(TASKS)}")
    if model_name not in cells.PRESETS:
        raise SystemExit(f"odelab: --model: unknown model {model_name!r}; choose from {sorted(cells.PRESETS)}")
    task = TASKS[task_name]
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
    data = _load_data(task, args.seed, settings["length"], counts)
    x_train, y_train = data["train"]
    build = _builder(task, model_name, x_train.shape[-1], hidden, y_train.shape[-1], args.seed)
    model = build()
    try:
        scheme_analysis.recurrent_layers(model.body)
    except (TypeError, ValueError) as err:
        raise SystemExit(f"odelab: compare-schemes: {err}")
    train_fields = {k: v for k, v in preset.items() if k != "hidden_size"}  # lr, batch size, optimizer of the task
    config = TrainConfig(**{**train_fields, "epochs": settings["epochs"]}, seed=args.seed)
    print(f"odelab compare-schemes {task_name}: model {model_name}, hidden {hidden}, data "
          f"{', '.join(f'{k} {tuple(v[0].shape)}' for k, v in data.items())}", flush=True)
    if saved_state is not None:
        model.load_state_dict(saved_state)
        trained = {"source": str(args.run_dir or args.checkpoint)}
    else:
        spec = FitSpec(task_name, model_name, "quick", hidden=hidden, epochs=settings["epochs"], seed=args.seed,
                       progress=False)
        model, fitted = run_fit(spec, data)
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
        retrain = TrainConfig(**{**train_fields, "epochs": settings["retrain_epochs"]}, seed=args.seed)
        training = scheme_analysis.train_under_schemes(build, data, retrain, schemes)
    result = {"task": task_name, "model": model_name, "hidden_size": hidden, "settings": settings, "trained": trained,
              "evaluation": evaluation, "training": training, "wall_seconds": time.perf_counter() - tic}
    _write(out, "compare_schemes", result)
    plot_scheme_comparison(evaluation, training, out / "compare_schemes.png",
                           title=f"{task_name}: {model_name} (trained with {evaluation['trained_scheme']})")
    print(scheme_analysis.format_table(evaluation, training))
    print(f"\n{result['wall_seconds']:.0f} s; results in {out}/ (compare_schemes.json, compare_schemes.png)")
    return 0


def add_command(sub) -> None:
    p = sub.add_parser("compare-schemes", help="one trained model's vector field under every scheme and step")
    p.add_argument("--task", default="fhn")
    p.add_argument("--model", default="lem", help="a Recurrent-based preset (lem, cornn, unicornn, ltc, lrcu-a, ...)")
    p.add_argument("--quick", action="store_true",
                   help=f"tiny run of a few minutes: {QUICK}")
    p.add_argument("--run", dest="run_dir", help="load the trained model of an `odelab fit` run folder (results.json, checkpoint.pt)")
    p.add_argument("--checkpoint", help="load a state dict or an odelab checkpoint for --task/--model/--hidden")
    p.add_argument("--hidden", type=int)
    p.add_argument("--epochs", type=int, help="epochs of the model evaluated in part (a)")
    p.add_argument("--retrain-epochs", type=int, help="epochs per scheme in part (b)")
    p.add_argument("--no-retrain", action="store_true", help="skip part (b), retraining under each scheme")
    p.add_argument("--length", type=int, help="truncate sequences to this many steps")
    p.add_argument("--sequences", type=int, help="at most this many sequences per split")
    p.add_argument("--schemes", help="comma-separated subset of the applicable schemes")
    p.add_argument("--finest", type=int, help="finest step = trained step / FINEST (a power of 2, default 8)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", help="output folder (default runs/compare-TASK-MODEL)")
    p.set_defaults(run=cmd_compare_schemes)
