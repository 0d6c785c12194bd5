"""``odelab stability``: gradients vs lag, the LEM state bound, UnICORNN energy and inverse, eigenvalues along
trajectories, LRC damping, long-range gradient contributions (``odelab.analysis.stability``); the coRNN energy and
input-perturbation bounds and UnICORNN's per-neuron step volume (``odelab.analysis.oscillator_bounds``); the LRC
paper's Lipschitz bounds (Theorem 1, ``odelab.analysis.lrc_smoothness``).

    odelab stability [--model lem,cornn,...]
                     [--study gradients|lem-bound|lem-gradient-length|lem-long-range|unicornn|eigen|lrc-damping|
                              oversmoothing|graphcon-spectrum|cornn-energy|perturbation|symplectic|lrc-lipschitz|all]
                     [--steps N] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ..analysis import lrc_smoothness, oscillator_bounds, oversmoothing, plots, stability
from ..analysis.schemes import json_ready
from ..models import cells
from ..systems import UnICORNN
from . import arguments

STUDIES = ("gradients", "lem-bound", "lem-gradient-length", "lem-long-range", "unicornn", "eigen", "lrc-damping",
           "oversmoothing", "graphcon-spectrum", "cornn-energy", "perturbation", "symplectic", "lrc-lipschitz")
# single-layer odelab cells of the stability studies (delay cells join the gradient study only)
STABILITY_MODELS = ("lem", "cornn", "unicornn", "oscillator", "ltc", "stc", "lrcu-a", "lrcu-s", "gru-ode", "taugru")
BASELINES = ("lstm", "rnn")


def _write(out: Path, name: str, result) -> None:
    (out / f"{name}.json").write_text(json.dumps(json_ready(result), indent=1))


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


def cmd_stability(args: argparse.Namespace) -> int:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
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
        print(f"\nLEM state bound (Rusch et al. 2022, Prop. 4.1), {args.steps} steps, inputs N(0, 100)\n"
              f"{'Δt':>6s}{'max state':>12s}{'max/bound':>11s}{'holds':>7s}  bound")
        for row in rows:
            print(f"{row['dt']:6.2f}{row['max_state']:12.4f}{row['max_ratio_to_bound']:11.4f}{str(row['bound_holds']):>7s}"
                  f"  {row['bound']}{'' if row['hypothesis'] else ' (outside Δt ≤ 1)'}")
    if "lem-gradient-length" in studies:
        lengths = tuple(sorted({max(2, round(args.steps / 2 ** k)) for k in range(4)}))  # N/8, N/4, N/2, N
        result = stability.lem_gradient_vs_length(lengths, hidden_size=args.hidden, seeds=seeds)
        _write(out, "lem_gradient_length", result)
        plots.plot_lem_gradient_length(result, out / "lem_gradient_length.png")
        print(f"\nLEM total gradient vs length, Δt = N^−s (Rusch et al. 2022, Prop. 4.2, Remark E.1); "
              f"N = {', '.join(map(str, lengths))}\n{'s':>6s}{'slope':>8s}{'bound rate':>12s}{'max |∂E/∂θ|':>14s}"
              f"{'bound':>11s}  holds")
        for s in result["exponents"]:
            rows = [r for r in result["rows"] if r["s"] == s]
            slope = result["slopes"][f"{s:g}"]
            print(f"{s:6.3f}{slope['slope'] or 0:8.2f}{slope['bound_rate']:12.2f}{rows[-1]['max_abs_gradient']:14.3e}"
                  f"{rows[-1]['bound']:11.2e}  {all(r['bound_holds'] for r in rows)}")
    if "lem-long-range" in studies:
        specs = [n for n in _model_list(args.model, stability.LONG_RANGE_MODELS)
                 if n == "rnn" or cells.parse_spec(n)[0] not in ("taugru", "delaygru")]  # no per-step split for delays
        k = min(10, args.steps // 2)
        lag = min(10, args.steps - 1 - k)
        result = stability.long_range_study(specs + [b for b in BASELINES if b not in specs], args.steps, k, lag,
                                            args.hidden, seeds=seeds)
        _write(out, "lem_long_range", result)
        plots.plot_long_range(result, out / "lem_long_range.png")
        print(f"\nlong-range gradient contributions (Rusch et al. 2022, Prop. 4.3 / E.2): max_θ |∂E_n^(k)/∂θ| of step "
              f"k = {k} for n = {k} … {args.steps - 1} (median of {len(seeds)} inits)\n{'model':14s}{'Δt':>7s}"
              f"{'n = k':>11s}{f'n − k = {lag}':>13s}{'n = N':>11s}{'decades/1000':>14s}{'per unit t':>12s}  underflow")
        for name, row in result["models"].items():
            dt, per_time = row["dt"], row["decades_per_unit_time"]
            print(f"{name:14s}{'—' if dt is None else f'{dt:g}':>7s}"
                  f"{row['contribution_first']:11.2e}{row['at_lag']['max']:13.2e}{row['contribution_last']:11.2e}"
                  f"{row['decades_per_1000_steps'] or 0:14.2f}{'—' if per_time is None else f'{per_time:.3f}':>12s}  "
                  + ("—" if row["underflow_lag"] is None else f"from n − k = {row['underflow_lag']}"))
        scaling = result["dt_scaling"]
        fitted = {key.removeprefix("system."): slope for key, slope in scaling["slopes"].items() if slope is not None}
        if fitted:
            print(f"LEM Δt scaling at n − k = {lag}, Δt = {', '.join(f'{dt:g}' for dt in scaling['dts'])}: slope of "
                  "log contribution vs log Δt: " + ", ".join(f"{key} {slope:.2f}" for key, slope in fitted.items())
                  + " (Prop. 4.3: 3/2 for W_y)")
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
        print(f"\nLRC vs STC damping (Farsang et al. 2024, §5.1)\n{'':4s}{'model':24s}{'ZC fine':>8s}{'E1 sign ch.':>12s}"
              f"{'|eig(I+J)|':>18s}")
        for label, setup in result.items():
            for name, row in setup["models"].items():
                amp = ", ".join(f"{a:.3f}" for a in row["e1_amplification"])
                print(f"{label:4s}{name:24s}{row['zero_crossings_fine']:8d}{row['sign_changes_e1']:12d}{amp:>18s}")
    if "cornn-energy" in studies:
        rows = oscillator_bounds.cornn_energy_study(steps=args.steps, hidden_size=args.hidden, seeds=seeds)
        _write(out, "cornn_energy", rows)
        oscillator_bounds.plot_cornn_energy(rows, out / "cornn_energy.png")
        print(f"\ncoRNN energy yᵀy + zᵀz/γ against m t_n/γ (thesis (2.48); (2.10) at γ = ε = 1), {args.steps} steps, "
              f"inputs N(0, 100)\n{'setting':20s}{'damping':>9s}{'Δt':>7s}{'γ':>6s}{'ε':>6s}{'Δt limit':>10s}"
              f"{'max energy':>12s}{'max/bound':>11s}  holds")
        for row in rows:
            holds = "yes" if row["bound_holds"] else f"no, from n = {row['first_violation_step']}"
            mark = " " if row["condition_holds"] else "!"
            print(f"{row['setting']:20s}{row['damping']:>9s}{row['dt']:7.3g}{row['gamma']:6.3g}{row['epsilon']:6.3g}"
                  f"{row['step_limit']:9.3g}{mark}{row['max_energy']:12.3e}{row['max_ratio_to_bound']:11.3e}  {holds}")
        print("(! : Δt outside the damping's sufficient condition, (2.47) explicit, (2.50) implicit)")
    if "perturbation" in studies:
        result = oscillator_bounds.perturbation_study(steps=args.steps, hidden_size=args.hidden, seeds=seeds)
        _write(out, "perturbation", result)
        oscillator_bounds.plot_perturbation(result, out / "perturbation.png")
        print(f"\ninput perturbation ū = u + {result['delta']:g} ξ: ‖ΔX_n‖² against 4 m t_n (thesis (2.12), coRNN at "
              f"γ = ε = 1, Δt = {result['dt']:g}), {args.steps} steps\n{'model':16s}{'gain':>6s}{'‖ΔX_1‖²':>11s}"
              f"{'max ‖ΔX_n‖²':>13s}{'log10 ampl.':>13s}{'max/bound':>11s}")
        for row in result["rows"]:
            print(f"{row['model']:16s}{row['gain']:6g}{row['first']:11.2e}{row['max']:13.2e}"
                  f"{row['log10_amplification']:13.2f}{row['max_ratio_to_bound']:11.2e}"
                  + ("" if row["bound_applies"] else "  (no bound)"))
    if "symplectic" in studies:
        result = oscillator_bounds.symplectic_study(steps=min(args.steps, 200), hidden_size=args.hidden, seed=seeds[0])
        _write(out, "symplectic", result)
        oscillator_bounds.plot_symplectic(result, out / "symplectic.png")
        print(f"\nUnICORNN step volume (thesis (3.25)), Δt = {result['dt']:g}, α = {result['alpha']:g}, "
              f"{result['steps']} steps\n{'scheme':18s}{'max|det B^i − 1|':>18s}{'max|det J − 1|':>16s}{'off-block':>11s}")
        for scheme, row in result["schemes"].items():
            print(f"{scheme:18s}{row['max_block_error']:18.2e}{row['max_map_error']:16.2e}{row['off_block']:11.1e}")
    if "lrc-lipschitz" in studies:
        result = lrc_smoothness.smoothness_study(seeds=seeds)
        _write(out, "lrc_lipschitz", result)
        setup, gates = result["setup"], result["inequalities_15_17"]
        print(f"\nLRC smoothness (Farsang et al. 2024, Thm 1): Euler output step, Δt = {setup['dt']:g}, "
              f"m = {setup['hidden_size']}, n = {setup['input_size']}, K = {setup['outputs']}, |y| ≤ {setup['h_bound']:g}, "
              f"o = {setup['shrink']:g} o*\n{'seed':>4s}{'λ^s':>9s}{'λ^r (A)':>9s}{'λ^r (S)':>9s}{'emp. STC':>10s}"
              f"{'emp. A':>8s}{'emp. S':>8s}{'|ḣ^r − εḣ^s|':>14s}")
        for row in result["rows"]:
            print(f"{row['seed']:4d}{row['lambda_stc']:9.3f}{row['lambda_lrc']:9.3f}{row['lambda_lrc_symmetric']:9.3f}"
                  f"{row['empirical_stc']:10.3f}{row['empirical_lrc']:8.3f}{row['empirical_lrc_symmetric']:8.3f}"
                  f"{row['field_identity_error']:14.1e}")
        print(f"bounds ordered λ^r < λ^s: {result['all_bounds_ordered']}; empirical ordered in "
              f"{result['empirical_ordered']}/{len(result['rows'])} (Thm 1 orders the bounds only); eqs. 15–17 max "
              f"violation {max(gates.values()):.1e}")
    for name in ("oversmoothing", "graphcon-spectrum"):  # graphs (Rusch 2023, chs. 7-8): odelab.analysis.oversmoothing
        if name in studies:
            result = oversmoothing.run_study(name, str(out))
            print(f"\n{name}: {result['files']['json']}, {result['files']['png']}")
    print(f"\n{time.perf_counter() - tic:.0f} s; results in {out}/")
    return 0


def add_command(sub) -> None:
    p = sub.add_parser("stability", help="gradients vs lag, LEM bound, long-range gradient contributions, UnICORNN "
                                         "energy, eigenvalues, LRC damping, coRNN energy and perturbation bounds, "
                                         "UnICORNN step volume, LRC Lipschitz bounds")
    p.add_argument("--model", help=f"comma-separated models (default {','.join(STABILITY_MODELS)}; lem-long-range: "
                                   f"{','.join(stability.LONG_RANGE_MODELS)}); a model's keywords in brackets, e.g. "
                                   "lem[dt=0.01]; lstm and rnn are always added to the gradient and long-range studies")
    p.add_argument("--study", default="all", choices=STUDIES + ("all",), metavar="STUDY",
                   help=f"one of {', '.join(STUDIES)}, or all (default)")
    p.add_argument("--steps", type=arguments.integer(2), default=1000,
                   help="sequence length (>= 2; up to 10^4 for the gradient study)")
    p.add_argument("--hidden", type=arguments.integer(1), default=16, help="hidden size (>= 1)")
    p.add_argument("--seeds", type=arguments.integer(1), default=3, help="random initialisations (>= 1; median)")
    p.add_argument("--out", help="output folder (default runs/stability)")
    p.add_argument("--threads", type=arguments.integer(1),
                   help="CPU threads for torch (>= 1; default torch's: on a shared machine 1 is often faster)")
    p.set_defaults(run=cmd_stability)
