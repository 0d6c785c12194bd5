"""The ``odelab compare-schemes`` and ``odelab stability`` subcommands.

    odelab compare-schemes --task fhn --model lem [--quick] [--run DIR | --checkpoint PATH] [--out DIR]
    odelab stability [--model lem,cornn,...] [--study gradients|lem-bound|unicornn|eigen|lrc-damping|all]
                     [--steps N] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from .. import cells
from ..solvers.schemes import FIXED_SCHEMES
from ..systems import UnICORNN
from . import schemes as scheme_analysis
from . import stability

# compare-schemes --quick: a few minutes on 2 CPU cores
QUICK = dict(length=200, train=128, valid=64, test=64, epochs=20, retrain_epochs=8, finest=8)
STUDIES = ("gradients", "lem-bound", "unicornn", "eigen", "lrc-damping")
# single-layer odelab cells of the stability studies (delay cells join the gradient study only)
STABILITY_MODELS = ("lem", "cornn", "unicornn", "oscillator", "ltc", "stc", "lrcu-a", "lrcu-s", "gru-ode", "taugru")
BASELINES = ("lstm", "rnn")


def _write(out: Path, name: str, result) -> None:
    (out / f"{name}.json").write_text(json.dumps(scheme_analysis.json_ready(result), indent=1))


def _model_list(text: str | None, default) -> list[str]:
    """Model specs from --model (``lem,lem[dt=0.01],rnn``), each checked (name and keywords)."""
    specs = list(default) if not text else cells.split_specs(text)
    for spec in specs:
        if spec != "rnn":
            try:
                cells.parse_spec(spec)
            except ValueError as err:
                raise SystemExit(f"odelab: --model: {err} (or rnn)") from None
    return specs


# ---------------------------------------------------------------------------------------------------------------
# compare-schemes


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
    from ..train import SequenceRegressor

    options = task.model_options(model, {}) if hasattr(task, "model_options") else {}
    last = getattr(task, "target", "sequence") == "last"

    def build():
        torch.manual_seed(seed)
        return SequenceRegressor(cells.PRESETS[model](input_size, hidden, **options), hidden, output_size, last=last)

    return build


def cmd_compare_schemes(args: argparse.Namespace) -> int:
    from ..tasks import TASKS, settings as task_settings
    from ..train import TrainConfig, fit
    from .plots import plot_scheme_comparison

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
        fitted = fit(model, data, config, progress=False)
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


# ---------------------------------------------------------------------------------------------------------------
# stability


def cmd_stability(args: argparse.Namespace) -> int:
    from . import plots

    studies = STUDIES if args.study == "all" else (args.study,)
    models = _model_list(args.model, STABILITY_MODELS)
    seeds = tuple(range(args.seeds))
    out = Path(args.out or "runs/stability")
    out.mkdir(parents=True, exist_ok=True)
    tic = time.perf_counter()
    if "gradients" in studies:
        names = models + [b for b in BASELINES if b not in models]
        result = stability.gradients_vs_lag(names, args.steps, args.hidden, seeds=seeds)
        _write(out, "gradients", result)
        plots.plot_gradients(result, out / "gradients.png")
        print(f"gradients over {args.steps} steps (median of {len(seeds)} inits)\n"
              f"{'model':14s}{'‖∂L/∂h_T‖':>12s}{'‖∂L/∂h_1‖':>12s}{'log10 ratio':>13s}{'decades/1000':>14s}"
              "  underflow")
        for name, row in result.items():
            ratio = row["log10_ratio_last_to_lag0"]
            print(f"{name:14s}{row['norm_lag0']:12.3e}{row['norm_last']:12.3e}"
                  f"{'—' if ratio is None else f'{ratio:.2f}':>13s}{row['decades_per_1000_steps']:14.2f}  "
                  + ("—" if row["underflow_lag"] is None else f"from lag {row['underflow_lag']}"))
    if "lem-bound" in studies:
        rows = stability.lem_state_bound(steps=args.steps, hidden_size=args.hidden, seeds=seeds)
        _write(out, "lem_bound", rows)
        plots.plot_lem_bound(rows, out / "lem_bound.png")
        print(f"\nLEM state bound (000 Prop. 4.1), {args.steps} steps, inputs N(0, 100)\n"
              f"{'Δt':>6s}{'max state':>12s}{'max/bound':>11s}{'holds':>7s}  bound")
        for row in rows:
            print(f"{row['dt']:6.2f}{row['max_state']:12.4f}{row['max_ratio_to_bound']:11.4f}{str(row['bound_holds']):>7s}"
                  f"  {row['bound']}{'' if row['hypothesis'] else ' (outside Δt ≤ 1)'}")
    if "unicornn" in studies:
        torch.manual_seed(seeds[0])
        system = UnICORNN(1, args.hidden, alpha=0.5).double()
        energy = stability.energy_drift(system, steps=args.steps)
        lengths = sorted({10, 100, min(1000, args.steps), args.steps})
        inverse = stability.inverse_study(lengths, hidden_size=args.hidden)
        _write(out, "unicornn", {"energy": energy, "inverse": inverse})
        plots.plot_unicornn(energy, inverse, out / "unicornn.png")
        print(f"\nUnICORNN energy, Δt = 0.5, {args.steps} steps, held input\n{'scheme':18s}{'max |ΔH|':>12s}{'final |ΔH|':>12s}")
        for name, row in energy.items():
            print(f"{name:18s}{row['max_drift']:12.3e}{row['final_drift']:12.3e}")
        print("inverse step (3.7) reconstruction error, Δt = 2: " + ", ".join(
            f"T={n}: f32 {a:.1e} / f64 {b:.1e}" for n, a, b in zip(lengths, inverse["float32"], inverse["float64"])))
    if "eigen" in studies:
        names = [n for n in models if n != "rnn" and cells.parse_spec(n)[0] not in ("lstm", "gru", "taugru", "delaygru")]
        result = stability.eigen_study(names, steps=min(args.steps, 500), hidden_size=args.hidden)
        _write(out, "eigen", result)
        plots.plot_eigen(result, out / "eigen.png")
        regions = list(stability.STABILITY_FUNCTIONS)
        print("\neigenvalues of h·J along a trajectory: fraction inside each stability region\n"
              f"{'model':12s}{'scheme':>18s}{'max|hλ|':>9s}" + "".join(f"{r[:14]:>16s}" for r in regions))
        for name, row in result.items():
            print(f"{name:12s}{row['scheme']:>18s}{row['max_abs']:9.3f}"
                  + "".join(f"{row['inside'][r]:16.2f}" for r in regions))
    if "lrc-damping" in studies:
        result = stability.damping_study()
        _write(out, "lrc_damping", result)
        plots.plot_damping(result, out / "lrc_damping.png")
        print(f"\nLRC vs STC damping (lrc.md §5.1)\n{'':4s}{'model':24s}{'ZC fine':>8s}{'E1 sign ch.':>12s}"
              f"{'|eig(I+J)|':>18s}")
        for label, setup in result.items():
            for name, row in setup["models"].items():
                amp = ", ".join(f"{a:.3f}" for a in row["e1_amplification"])
                print(f"{label:4s}{name:24s}{row['zero_crossings_fine']:8d}{row['sign_changes_e1']:12d}{amp:>18s}")
    print(f"\n{time.perf_counter() - tic:.0f} s; results in {out}/")
    return 0


def add_analysis_commands(sub) -> None:
    """Register ``compare-schemes`` and ``stability`` on the ``odelab`` subparsers."""
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

    p = sub.add_parser("stability", help="gradients vs lag, LEM bound, UnICORNN energy, eigenvalues, LRC damping")
    p.add_argument("--model", help=f"comma-separated models (default {','.join(STABILITY_MODELS)}); "
                                   "a model's keywords in brackets, e.g. lem[dt=0.01]; lstm and rnn are always "
                                   "added to the gradient study")
    p.add_argument("--study", default="all", choices=STUDIES + ("all",))
    p.add_argument("--steps", type=int, default=1000, help="sequence length (up to 10^4 for the gradient study)")
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--seeds", type=int, default=3, help="random initialisations (median)")
    p.add_argument("--out", help="output folder (default runs/stability)")
    p.set_defaults(run=cmd_stability)
