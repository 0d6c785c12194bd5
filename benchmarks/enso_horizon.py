"""Which ENSO / Mackey--Glass task gives the magnitudes of Erichson et al. 2025, Tables 4 and 8? A sweep over the
forecast horizon and the sample spacing (the paper states neither; see odelab.data.delay_oscillators).

    python benchmarks/enso_horizon.py [--epochs 100] [--seeds 1] [--models lstm taugru] [--jobs 2]
                                      [--readings enso:2:1 mackey-glass:10:1 ...] [--baselines-only]

A reading is (task, T, k): predict s(t + T) from s up to t, with every k-th integration node kept (spacing
k·dt, dt = 0.1 for ENSO and 0.25 for Mackey--Glass), i.e. ``horizon`` H = T / (k·dt) kept nodes ahead and
``stride`` k; T = dt, k = 1 is odelab's default one-step reading. For each reading:

* free baselines on the 1024 test sequences: persistence ŝ(t + T) = s(t), linear extrapolation
  ŝ(t + T) = s(t) + H (s(t) − s(t − k·dt)) (where s(t − k·dt) is an input), and the mean predictor (the train
  targets' mean, i.e. about the signal variance);
* trained models (``--readings``): ``run_fit(FitSpec(task, model, "paper", epochs=E, seed=s,
  data_options={"horizon": H, "stride": k}), data=...)`` -- the paper's protocol (16 units, Adam lr 0.01,
  batch 32, τ-GRU τ = 20 / 10 steps of the kept spacing) for E of its 400 epochs, 128 train / 128 valid /
  1024 test sequences; the test MSE of the best validation epoch.

MSEs are reported ×10⁻² as in the paper. Results accumulate in benchmarks/results/enso_horizon.json (a run
already there is not repeated), then the markdown table (benchmarks/results/enso_horizon.md) and the figure
(docs/figures/enso_horizon.png: test MSE against T, log-log, with the paper's values as horizontal lines) are
written from everything in it. Each run is one process with one thread (``--jobs`` at a time).
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "enso_horizon.json"
TABLE = ROOT / "benchmarks" / "results" / "enso_horizon.md"
FIGURE = ROOT / "docs" / "figures" / "enso_horizon.png"

DT = {"enso": 0.1, "mackey-glass": 0.25}
# Erichson et al. 2025, Table 4 (ENSO) and Table 8 (Mackey--Glass): test MSE ×10⁻²
PAPER = {
    "enso": {"taugru": 0.17, "lem": 0.31, "gru": 0.53, "lstm": 0.92, "cornn": 4.00},
    "mackey-glass": {"taugru": 0.1358, "lem": 0.1430, "gru": 0.4351, "lstm": 0.6679, "cornn": 1.6835},
}
NAMES = {"taugru": "τ-GRU", "lem": "LEM", "gru": "GRU", "lstm": "LSTM", "cornn": "coRNN", "delaygru": "Delay GRU"}
BASELINE_GRID = {  # horizons T (time units) × strides k where T is a multiple of k·dt
    "enso": ([0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 13, 20], [1, 2, 5, 10, 20]),
    "mackey-glass": ([0.25, 0.5, 1, 2, 3, 5, 10, 17, 25, 50], [1, 2, 4, 20, 40]),
}
SWEEP = ["enso:0.1:1", "enso:0.5:1", "enso:1:1", "enso:2:1", "enso:5:1", "enso:1:10", "enso:2:20",
         "mackey-glass:0.25:1", "mackey-glass:1:1", "mackey-glass:5:1", "mackey-glass:10:1", "mackey-glass:25:1",
         "mackey-glass:5:20", "mackey-glass:10:40"]


def horizon_of(task: str, T: float, stride: int) -> int | None:
    """H = T / (stride·dt) kept nodes, or None where T is not a whole number of kept spacings."""
    h = T / (stride * DT[task])
    return round(h) if abs(h - round(h)) < 1e-9 and round(h) >= 1 else None


def load(task: str, horizon: int, stride: int, seed: int = 1234) -> dict:
    from odelab.data import enso, mackey_glass
    return (enso if task == "enso" else mackey_glass)(seed=seed, horizon=horizon, stride=stride)


def baselines(task: str) -> list[dict]:
    """Persistence, linear extrapolation and the mean predictor on the test split, for the grid of readings."""
    horizons, strides = BASELINE_GRID[task]
    rows = []
    for T in horizons:
        for k in strides:
            h = horizon_of(task, T, k)
            if h is None:
                continue
            data = load(task, h, k)
            x, y = (v[..., 0].double() for v in data["test"])
            mean = data["train"][1].double().mean()
            rows.append({
                "task": task, "T": T, "stride": k, "horizon": h, "spacing": k * DT[task], "length": x.shape[1],
                "persistence": 100 * float(((x - y) ** 2).mean()),
                "linear_extrapolation": 100 * float(((x[:, 1:] + h * (x[:, 1:] - x[:, :-1]) - y[:, 1:]) ** 2).mean()),
                "mean_predictor": 100 * float(((y - mean) ** 2).mean()),
            })
    return rows


def train(job: tuple) -> dict:
    """One training run in this (worker) process, one thread."""
    task, T, k, model, seed, epochs = job
    torch.set_num_threads(1)
    from odelab.training import FitSpec, run_fit
    h = horizon_of(task, T, k)
    data = load(task, h, k)
    tic = time.perf_counter()
    _, res = run_fit(FitSpec(task, model, "paper", epochs=epochs, seed=seed, progress=False,
                             data_options={"horizon": h, "stride": k}), data=data)
    return {"task": task, "T": T, "stride": k, "horizon": h, "model": model, "seed": seed, "epochs": epochs,
            "test_mse": 100 * res["test_rmse"] ** 2, "valid_mse": 100 * res["valid_rmse"] ** 2,
            "best_epoch": res["best_epoch"], "parameters": res["parameters"], "model_options": res["model_options"],
            "seconds": time.perf_counter() - tic}


def run_key(r: dict) -> str:
    return f"{r['task']}|T={r['T']:g}|stride={r['stride']}|{r['model']}|seed={r['seed']}|epochs={r['epochs']}"


def summarise(runs: list[dict]) -> dict:
    """(task, T, stride, model, epochs) -> (mean, sample std or None, n, seeds)."""
    groups: dict = {}
    for r in runs:
        groups.setdefault((r["task"], r["T"], r["stride"], r["model"], r["epochs"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        values = [r["test_mse"] for r in sorted(rs, key=lambda r: r["seed"])]
        out[key] = (statistics.mean(values), statistics.stdev(values) if len(values) > 1 else None, len(values),
                    sorted(r["seed"] for r in rs))
    return out


def fmt(x: float) -> str:
    return f"{x:.3g}" if x >= 0.001 else f"{x:.2e}"


def table(results: dict) -> str:
    """Markdown: one row per trained reading (models mean ± std over seeds), its free baselines, the paper."""
    base = {(b["task"], b["T"], b["stride"]): b for b in results["baselines"]}
    summary = summarise(results["runs"])
    models = [m for m in ("taugru", "lem", "gru", "lstm") if any(k[3] == m for k in summary)]
    lines = [f"| task | T (time units) | spacing | H | length | persistence | linear extrap. | "
             + " | ".join(NAMES[m] for m in models) + " | epochs |",
             "| --- " * (8 + len(models)) + "|"]
    readings = sorted({k[:3] + (k[4],) for k in summary}, key=lambda r: (r[0] != "enso", r[2] != 1, r[1], r[3]))
    for task, T, k, epochs in readings:
        b = base.get((task, T, k)) or {"persistence": math.nan, "linear_extrapolation": math.nan, "length": "",
                                       "horizon": horizon_of(task, T, k)}
        cells = []
        for m in models:
            s = summary.get((task, T, k, m, epochs))
            cells.append("" if s is None else fmt(s[0]) + (f" ± {fmt(s[1])}" if s[1] is not None else "")
                         + f" ({s[2]})")
        lines.append(f"| {task} | {T:g} | {k * DT[task]:g} | {b['horizon']} | {b['length']} | {fmt(b['persistence'])} | "
                     f"{fmt(b['linear_extrapolation'])} | " + " | ".join(cells) + f" | {epochs} |")
    for task in PAPER:
        lines.append(f"| {task}: paper | | | | | | | "
                     + " | ".join(f"{PAPER[task][m]:g}" if m in PAPER[task] else "" for m in models) + " | 400 |")
    lines.append("")
    lines.append("Test MSE ×10⁻² (mean ± sample std over the seeds, their number in brackets); T = H · spacing.")
    return "\n".join(lines) + "\n"


def baseline_table(results: dict) -> str:
    lines = ["| task | T | persistence | linear extrap. (k = 1) | linear extrap. (coarsest k) | mean predictor |",
             "| --- | --- | --- | --- | --- | --- |"]
    for task in DT:
        rows = [b for b in results["baselines"] if b["task"] == task]
        for T in sorted({b["T"] for b in rows}):
            at = sorted((b for b in rows if b["T"] == T), key=lambda b: b["stride"])
            lines.append(f"| {task} | {T:g} | {fmt(at[0]['persistence'])} | {fmt(at[0]['linear_extrapolation'])} | "
                         f"{fmt(at[-1]['linear_extrapolation'])} (k = {at[-1]['stride']}) | {fmt(at[0]['mean_predictor'])} |")
    return "\n".join(lines) + "\n"


def figure(results: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    summary = summarise(results["runs"])
    colours = {"taugru": "C3", "lem": "C2", "gru": "C4", "lstm": "C0", "cornn": "C5"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, task in zip(axes, DT):
        rows = sorted((b for b in results["baselines"] if b["task"] == task and b["stride"] == 1), key=lambda b: b["T"])
        Ts = [b["T"] for b in rows]
        ax.plot(Ts, [b["persistence"] for b in rows], "k-o", ms=3, label="persistence")
        ax.plot(Ts, [b["linear_extrapolation"] for b in rows], "k:", label="linear extrapolation")
        ax.axhline(rows[0]["mean_predictor"], color="grey", lw=0.8, ls="-.", label="mean predictor")
        for m, v in PAPER[task].items():
            if m in ("taugru", "lstm", "lem", "gru"):
                ax.axhline(v, color=colours[m], lw=1, ls="--", alpha=0.7, label=f"paper {NAMES[m]} ({v:g})")
        epochs = max((k[4] for k in summary if k[0] == task), default=None)
        for m in ("taugru", "lem", "gru", "lstm"):
            for stride_one, style in ((True, "o-"), (False, "s")):
                pts = sorted((k[1], *summary[k][:2]) for k in summary
                             if k[0] == task and k[3] == m and k[4] == epochs and (k[2] == 1) == stride_one)
                if not pts:
                    continue
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] or 0 for p in pts], fmt=style,
                            color=colours[m], mfc="none" if not stride_one else colours[m], ms=6, capsize=2,
                            label=f"{NAMES[m]} ({epochs} ep.)" + ("" if stride_one else ", H = 1 at spacing T"))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(top=2 * max(b["persistence"] for b in rows))  # linear extrapolation runs off far above
        ax.set_xlabel("horizon T (time units)")
        ax.set_ylabel("test MSE ×10⁻²")
        ax.set_title({"enso": "ENSO (spacing 0.1)", "mackey-glass": "Mackey–Glass (spacing 0.25)"}[task])
        ax.grid(alpha=0.3, which="both", lw=0.4)
        ax.legend(fontsize=7, loc="upper left" if task == "enso" else "lower right", framealpha=0.9)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=130)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--models", nargs="+", default=["lstm", "taugru"])
    p.add_argument("--readings", nargs="+", default=SWEEP, help="task:T:stride (T in time units)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--baselines-only", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)

    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    results["baselines"] = [row for task in DT for row in baselines(task)]
    results["paper"] = PAPER
    results["protocol"] = ("run_fit(FitSpec(task, model, 'paper', epochs, seed, data_options={horizon, stride}), "
                           "data=odelab.data.enso/mackey_glass(seed=1234, horizon=H, stride=k)): 16 units, Adam lr 0.01, "
                           "batch 32, tau-GRU tau = 20 (ENSO) / 10 (MG) kept steps; 128/128/1024 sequences; test MSE "
                           "x1e-2 at the best validation epoch; baselines on the same test split")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    done = {run_key(r) for r in results["runs"]}
    jobs = []
    if not args.baselines_only:
        for reading in args.readings:
            task, T, k = reading.split(":")
            T, k = float(T), int(k)
            if horizon_of(task, T, k) is None:
                raise SystemExit(f"{reading}: T is not a whole number of spacings {k}·{DT[task]}")
            for model in args.models:
                for seed in args.seeds:
                    job = (task, T, k, model, seed, args.epochs)
                    if run_key(dict(zip(("task", "T", "stride", "model", "seed", "epochs"), job))) not in done:
                        jobs.append(job)
    jobs.sort(key=lambda j: -(2001 // j[2]))  # long sequences first
    print(f"{len(jobs)} training runs, {args.jobs} at a time", flush=True)
    with mp.get_context("spawn").Pool(args.jobs) as pool:
        for r in pool.imap_unordered(train, jobs):
            results["runs"].append(r)
            RESULTS.write_text(json.dumps(results, indent=1))
            print(f"{run_key(r)}: test MSE {r['test_mse']:.4g}e-2 (best epoch {r['best_epoch']}, "
                  f"{r['seconds']:.0f} s)", flush=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    TABLE.write_text(baseline_table(results) + "\n" + table(results))
    print(TABLE.read_text())
    figure(results)
    print(f"wrote {RESULTS.relative_to(ROOT)}, {TABLE.relative_to(ROOT)}, {FIGURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
