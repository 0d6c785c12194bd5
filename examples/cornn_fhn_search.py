"""Random search of coRNN hyperparameters on FitzHugh–Nagumo one-step prediction (issue 15).

Rusch et al. (2022, LEM paper, Table 4) report a coRNN test RMSE of 0.4×10⁻² (24 units, ~1k parameters) on this
task but give no coRNN hyperparameters; the coRNN papers (Rusch & Mishra 2021; Rusch 2023, §2.4) tune Δt, γ, ε and
the learning rate by random search on a validation set. This script does that with the public API
(``odelab.training.run_fit``), then retrains the best configurations for longer with several seeds.

Search space (log-uniform unless stated; sampled from one numpy generator seeded by ``--search-seed``):

* damping: explicit (n̄ = n−1, the official code) or implicit (n̄ = n), probability ½ each;
* hidden size: 24 (the paper's, 1.2k parameters) with probability ½, 32 or 64 with ¼ each;
* γ ∈ [0.1, 10] and ε ∈ [0.6, 12] (ε > ½ is needed by the stability bounds below; the official coRNN scripts
  use γ ∈ [0.2, 66], ε ∈ [4.7, 15]);
* Δt = f · min(2, B) with f ∈ [0.15, 1], where B is the sufficient stability bound of the damping scheme
  (Rusch 2023, eqs. 2.47 and 2.50): B = (2ε − 1)/(γ + ε²) for explicit, B = (2ε − 1)/γ for implicit damping;
* learning rate ∈ [5×10⁻³, 8×10⁻²] (Adam, batch 32, no decay or clipping, as the official FHN script; the
  README's screen found coRNN better at higher rates, 1.38×10⁻² at 0.05).

Trial 0 is an anchor, the README's best setting (Δt 0.45, γ 1, ε 3, explicit, 24 units, lr 0.05), run under the
same epoch budget. Every trial trains on the same data (``fitzhugh_nagumo(seed=1234)``: 128 train, 128 validation,
1024 test sequences of 1000 steps) from model seed ``--seed``; the test RMSE is read at the epoch of best validation
RMSE, and configurations are ranked by validation RMSE only. The retraining phase runs the ``--top`` best distinct
configurations for ``--retrain-epochs`` epochs with ``--seeds`` model seeds each (initialisation and shuffling;
the data stay fixed) and reports mean ± sample std of the test RMSE. With ``--extend-epochs N`` the rank-1
configuration is trained once more for N epochs with each of ``--extend-seeds`` (checkpointed every epoch), for
when its retraining runs were still improving at their last epoch (best validation epoch = last).

Resumable: one JSON per finished trial (``OUT/trials/``) and per retraining run (``OUT/retrain/``); a rerun skips
them. Outputs: ``OUT/search.json``, ``OUT/search.md`` (table sorted by validation RMSE) and the scatter figure
``--figure`` (test RMSE against each hyperparameter).

    nice -n 5 python examples/cornn_fhn_search.py --trials 36 --epochs 150 --retrain-epochs 400 --extend-epochs 800
    python examples/cornn_fhn_search.py --phase report      # tables and figure from the finished runs
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from odelab.data.tasks import TASKS
from odelab.training.run import FitError, FitSpec, run_fit

PAPER_RMSE = 0.4e-2  # Rusch et al. 2022, Table 4, coRNN
README_BEST_RMSE = 1.38e-2  # our earlier best coRNN (README: Δt 0.45, γ 1, ε 3, lr 0.05, 500 epochs)
ANCHOR = dict(damping="explicit", hidden=24, dt=0.45, gamma=1.0, epsilon=3.0, lr=0.05)


def stability_bound(damping: str, gamma: float, epsilon: float) -> float:
    """Sufficient Δt bound for bounded hidden states (Rusch 2023, eq. 2.47 explicit, eq. 2.50 implicit damping)."""
    if damping == "explicit":
        return (2 * epsilon - 1) / (gamma + epsilon ** 2)
    return (2 * epsilon - 1) / gamma


def log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def sample_configs(trials: int, search_seed: int) -> list[dict]:
    """The anchor, then ``trials`` random configurations (the same list for the same seed, whatever was run)."""
    rng = np.random.default_rng(search_seed)
    configs = [dict(ANCHOR, kind="anchor")]
    for _ in range(trials):
        damping = str(rng.choice(["explicit", "implicit"]))
        hidden = int(rng.choice([24, 32, 64], p=[0.5, 0.25, 0.25]))
        gamma = log_uniform(rng, 0.1, 10.0)
        epsilon = log_uniform(rng, 0.6, 12.0)
        dt = log_uniform(rng, 0.15, 1.0) * min(2.0, stability_bound(damping, gamma, epsilon))
        lr = log_uniform(rng, 5e-3, 8e-2)
        configs.append(dict(damping=damping, hidden=hidden, dt=dt, gamma=gamma, epsilon=epsilon, lr=lr,
                            kind="random"))
    for config in configs:
        config["dt_over_bound"] = config["dt"] / stability_bound(config["damping"], config["gamma"],
                                                                  config["epsilon"])
    return configs


def train(config: dict, epochs: int, seed: int, data: dict) -> dict:
    """One run_fit of coRNN on FHN with ``config``; a diverged run is recorded, not raised."""
    spec = FitSpec("fhn", "cornn", "official-cuda", epochs=epochs, lr=config["lr"], hidden=config["hidden"],
                   seed=seed, progress=False,
                   model_options=dict(dt=config["dt"], gamma=config["gamma"], epsilon=config["epsilon"],
                                      damping=config["damping"]))
    tic = time.perf_counter()
    try:
        _, result = run_fit(spec, data=data)
    except FitError as err:
        return dict(status="diverged", error=str(err), valid_rmse=math.inf, test_rmse=math.inf,
                    wall_seconds=time.perf_counter() - tic)
    history = result["history"]
    return dict(status="ok", valid_rmse=result["valid_rmse"], test_rmse=result["test_rmse"],
                best_epoch=result["best_epoch"], parameters=result["parameters"],
                wall_seconds=time.perf_counter() - tic, train_rmse=history["train_rmse"],
                valid_curve=history["valid_rmse"])


def finished(path: Path, config: dict, epochs: int, seed: int) -> dict | None:
    """The saved record at ``path`` if it is of the same configuration, epoch count and seed."""
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    same = record.get("epochs") == epochs and record.get("seed") == seed and all(
        record["config"].get(k) == v for k, v in config.items())
    return record if same else None


def save(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


def describe(config: dict) -> str:
    return (f"{config['damping']:8s} h {config['hidden']:2d} Δt {config['dt']:.3g} γ {config['gamma']:.3g} "
            f"ε {config['epsilon']:.3g} lr {config['lr']:.3g}")


def run_search(args, data: dict) -> list[dict]:
    configs = sample_configs(args.trials, args.search_seed)
    records = []
    for i, config in enumerate(configs):
        path = args.out / "trials" / f"trial_{i:03d}.json"
        record = finished(path, config, args.epochs, args.seed)
        note = "done before"
        if record is None:
            record = dict(trial=i, config=config, epochs=args.epochs, seed=args.seed,
                          **train(config, args.epochs, args.seed, data))
            save(path, record)
            note = f"{record['wall_seconds']:.0f} s"
        records.append(record)
        best = min(r["valid_rmse"] for r in records)
        print(f"[{i + 1}/{len(configs)}] {describe(config)} -> valid {record['valid_rmse'] * 100:.3f} "
              f"test {record['test_rmse'] * 100:.3f} ×10⁻² ({record['status']}, {note}; best valid so far "
              f"{best * 100:.3f})", flush=True)
    return records


def top_configs(records: list[dict], count: int) -> list[dict]:
    ranked = sorted((r for r in records if r["status"] == "ok"), key=lambda r: r["valid_rmse"])
    return [r for r in ranked[:count]]


def run_retrain(args, data: dict, records: list[dict]) -> list[dict]:
    summaries = []
    for rank, trial in enumerate(top_configs(records, args.top), 1):
        runs = []
        for seed in args.seeds:
            path = args.out / "retrain" / f"trial_{trial['trial']:03d}_seed_{seed}.json"
            record = finished(path, trial["config"], args.retrain_epochs, seed)
            note = "done before"
            if record is None:
                record = dict(trial=trial["trial"], config=trial["config"], epochs=args.retrain_epochs, seed=seed,
                              **train(trial["config"], args.retrain_epochs, seed, data))
                save(path, record)
                note = f"{record['wall_seconds']:.0f} s"
            runs.append(record)
            print(f"retrain #{rank} (trial {trial['trial']}) seed {seed}: {describe(trial['config'])} -> valid "
                  f"{record['valid_rmse'] * 100:.3f} test {record['test_rmse'] * 100:.3f} ×10⁻² "
                  f"(best epoch {record.get('best_epoch')}, {note})", flush=True)
        summaries.append(summarise(rank, trial, runs))
    return summaries


def summarise(rank: int, trial: dict, runs: list[dict]) -> dict:
    ok = [r for r in runs if r["status"] == "ok"]
    tests, valids = [r["test_rmse"] for r in ok], [r["valid_rmse"] for r in ok]
    std = lambda xs: statistics.stdev(xs) if len(xs) > 1 else float("nan")
    return dict(rank=rank, trial=trial["trial"], config=trial["config"], search_valid_rmse=trial["valid_rmse"],
                search_test_rmse=trial["test_rmse"], seeds=[r["seed"] for r in runs],
                diverged=len(runs) - len(ok), epochs=runs[0]["epochs"],
                test_rmse=[r["test_rmse"] for r in runs], valid_rmse=[r["valid_rmse"] for r in runs],
                best_epochs=[r.get("best_epoch") for r in runs],
                test_mean=statistics.mean(tests) if tests else math.inf, test_std=std(tests),
                valid_mean=statistics.mean(valids) if valids else math.inf, valid_std=std(valids))


def load_retrain(args, records: list[dict]) -> list[dict]:
    """The retraining summaries from the saved runs (for ``--phase report``)."""
    summaries = []
    for rank, trial in enumerate(top_configs(records, args.top), 1):
        runs = [finished(args.out / "retrain" / f"trial_{trial['trial']:03d}_seed_{s}.json", trial["config"],
                         args.retrain_epochs, s) for s in args.seeds]
        runs = [r for r in runs if r is not None]
        if runs:
            summaries.append(summarise(rank, trial, runs))
    return summaries


def extend_dir(args, trial: dict, seed: int) -> Path:
    return args.out / "extend" / f"trial_{trial['trial']:03d}_seed_{seed}_epochs_{args.extend_epochs}"


def run_extend(args, data: dict, records: list[dict]) -> dict | None:
    """The rank-1 configuration (by validation) once more for ``--extend-epochs`` epochs with each of
    ``--extend-seeds``, through run_fit with an output folder: a checkpoint every epoch, so an interrupted run
    resumes where it was. Separate processes may take separate seeds."""
    if not args.extend_epochs:
        return None
    trial = top_configs(records, 1)[0]
    config = trial["config"]
    for seed in args.extend_seeds:
        out = extend_dir(args, trial, seed)
        if (out / "results.json").exists():
            continue
        spec = FitSpec("fhn", "cornn", "official-cuda", epochs=args.extend_epochs, lr=config["lr"],
                       hidden=config["hidden"], seed=seed, progress=False, out=out, resume=True,
                       model_options=dict(dt=config["dt"], gamma=config["gamma"], epsilon=config["epsilon"],
                                          damping=config["damping"]))
        print(f"extend trial {trial['trial']} to {args.extend_epochs} epochs (seed {seed}): {describe(config)}; "
              f"checkpoints in {out}", flush=True)
        run_fit(spec, data=data)
    return load_extend(args, records)


def load_extend(args, records: list[dict]) -> dict | None:
    """The finished extension runs of the rank-1 configuration (any seed in ``--extend-seeds``), summarised."""
    if not args.extend_epochs:
        return None
    trial = top_configs(records, 1)[0]
    runs = []
    for seed in args.extend_seeds:
        path = extend_dir(args, trial, seed) / "results.json"
        if path.exists():
            result = json.loads(path.read_text())
            runs.append(dict(seed=seed, epochs=len(result["history"]["valid_rmse"]), status="ok",
                             valid_rmse=result["valid_rmse"], test_rmse=result["test_rmse"],
                             best_epoch=result["best_epoch"], folder=str(path.parent)))
    return summarise(1, trial, runs) if runs else None


def fmt(x: float) -> str:
    return "diverged" if not math.isfinite(x) else f"{x * 100:.3f}"


def markdown(args, records: list[dict], summaries: list[dict], extended: dict | None = None) -> str:
    lines = [f"# coRNN on FitzHugh–Nagumo: random search ({len(records) - 1} random trials + anchor, "
             f"{args.epochs} epochs each, model seed {args.seed}, search seed {args.search_seed})", "",
             "RMSE ×10⁻²; test read at the epoch of best validation RMSE; sorted by validation RMSE "
             f"(selection never uses test). Paper (Rusch et al. 2022, Table 4): {PAPER_RMSE * 100:.1f}. "
             "B: sufficient Δt stability bound of the damping scheme (Rusch 2023, eqs. 2.47/2.50).", ""]
    if summaries:
        lines += [f"## Top {len(summaries)} retrained, {summaries[0]['epochs']} epochs, seeds "
                  f"{', '.join(map(str, summaries[0]['seeds']))} (mean ± sample std)", "",
                  "| rank | trial | damping | hidden | Δt | γ | ε | lr | valid | test | per seed (test) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for s in summaries:
            c = s["config"]
            lines.append(f"| {s['rank']} | {s['trial']} | {c['damping']} | {c['hidden']} | {c['dt']:.3g} | "
                         f"{c['gamma']:.3g} | {c['epsilon']:.3g} | {c['lr']:.3g} | {fmt(s['valid_mean'])} ± "
                         f"{s['valid_std'] * 100:.3f} | **{fmt(s['test_mean'])} ± {s['test_std'] * 100:.3f}** | "
                         f"{', '.join(fmt(t) for t in s['test_rmse'])} |")
        lines.append("")
    if extended is not None:
        e = extended
        lines += [f"## Rank 1 (trial {e['trial']}) extended to {e['epochs']} epochs, seeds "
                  f"{', '.join(map(str, e['seeds']))}", "",
                  f"{describe(e['config'])}: valid {fmt(e['valid_mean'])} ± {e['valid_std'] * 100:.3f}, test "
                  f"**{fmt(e['test_mean'])} ± {e['test_std'] * 100:.3f}** (per seed: "
                  f"{', '.join(fmt(t) for t in e['test_rmse'])}; best validation epochs "
                  f"{', '.join(map(str, e['best_epochs']))}).", ""]
    lines += ["## All trials", "",
              "| trial | damping | hidden | Δt | Δt/B | γ | ε | lr | valid | test | best epoch |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(records, key=lambda r: r["valid_rmse"]):
        c = r["config"]
        tag = " (anchor)" if c.get("kind") == "anchor" else ""
        lines.append(f"| {r['trial']}{tag} | {c['damping']} | {c['hidden']} | {c['dt']:.3g} | "
                     f"{c['dt_over_bound']:.2f} | {c['gamma']:.3g} | {c['epsilon']:.3g} | {c['lr']:.3g} | "
                     f"{fmt(r['valid_rmse'])} | {fmt(r['test_rmse'])} | {r.get('best_epoch', '—')} |")
    return "\n".join(lines) + "\n"


def plot(args, records: list[dict], summaries: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ok = [r for r in records if r["status"] == "ok"]
    panels = [("dt", "Δt", True), ("gamma", "γ", True), ("epsilon", "ε", True), ("lr", "learning rate", True),
              ("dt_over_bound", "Δt / stability bound B", True), ("hidden", "hidden size", False)]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), sharey=True)
    top = {r["trial"] for r in top_configs(records, args.top)}
    for ax, (key, label, log) in zip(axes.flat, panels):
        def x(r, key=key, log=log):  # explicit left, implicit right on the categorical hidden-size axis
            return r["config"][key] + (0 if log else (-1 if r["config"]["damping"] == "explicit" else 1))

        for damping, marker, colour in (("explicit", "o", "tab:blue"), ("implicit", "s", "tab:orange")):
            sel = [r for r in ok if r["config"]["damping"] == damping and r["config"].get("kind") != "anchor"]
            ax.scatter([x(r) for r in sel], [r["test_rmse"] * 100 for r in sel], marker=marker,
                       c=colour, alpha=0.75, label=f"{damping} damping")
        anchor = [r for r in ok if r["config"].get("kind") == "anchor"]
        ax.scatter([x(r) for r in anchor], [r["test_rmse"] * 100 for r in anchor], marker="*", s=160,
                   c="k", label="anchor (README setting)")
        chosen = [r for r in ok if r["trial"] in top]
        ax.scatter([x(r) for r in chosen], [r["test_rmse"] * 100 for r in chosen], s=180,
                   facecolors="none", edgecolors="red", linewidths=1.5, label="top 3 by validation")
        ax.axhline(PAPER_RMSE * 100, color="green", ls="--", lw=1, label="paper 0.4")
        ax.axhline(2.83, color="grey", ls=":", lw=1, label="linear extrapolation 2.83")
        if log:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            if key == "lr":
                ax.set_xticks([5e-3, 1e-2, 2e-2, 4e-2, 8e-2], ["0.005", "0.01", "0.02", "0.04", "0.08"])
        else:
            ax.set_xticks([24, 32, 64])
        ax.set_yscale("log")
        ax.set_xlabel(label)
    for ax in axes[:, 0]:
        ax.set_ylabel("test RMSE ×10⁻² (at best validation epoch)")
    diverged = len(records) - len(ok)
    fig.suptitle(f"coRNN on FitzHugh–Nagumo: {len(records) - 1} random trials + anchor, {args.epochs} epochs each"
                 + (f" ({diverged} diverged, not shown)" if diverged else ""))
    axes.flat[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=110)
    plt.close(fig)


def report(args, records: list[dict], summaries: list[dict], extended: dict | None = None) -> None:
    slim = [{k: v for k, v in r.items() if k not in ("train_rmse", "valid_curve")} for r in records]
    search = dict(task="fhn", model="cornn", data_seed=1234, model_seed=args.seed, search_seed=args.search_seed,
                  trials=len(records) - 1, epochs=args.epochs, retrain_epochs=args.retrain_epochs,
                  retrain_seeds=args.seeds, paper_test_rmse=PAPER_RMSE, records=slim, retrained=summaries,
                  extended=extended)
    (args.out / "search.json").write_text(json.dumps(search, indent=1))
    table = markdown(args, records, summaries, extended)
    (args.out / "search.md").write_text(table)
    if args.table is not None:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(table)
    plot(args, records, summaries)
    print(f"wrote {args.out / 'search.json'}, {args.out / 'search.md'}, {args.figure}"
          + (f", {args.table}" if args.table is not None else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="See the module docstring for the search space and protocol.")
    parser.add_argument("--trials", type=int, default=36, help="random trials (plus the anchor); default 36")
    parser.add_argument("--epochs", type=int, default=150, help="epochs per search trial; default 150")
    parser.add_argument("--top", type=int, default=3, help="configurations retrained; default 3")
    parser.add_argument("--retrain-epochs", type=int, default=400, help="epochs per retraining run; default 400")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1234, 1235, 1236],
                        help="model seeds of the retraining runs; default 1234 1235 1236")
    parser.add_argument("--seed", type=int, default=1234, help="model seed of the search trials; default 1234")
    parser.add_argument("--search-seed", type=int, default=2021, help="seed of the configuration sampler")
    parser.add_argument("--extend-epochs", type=int, default=0,
                        help="also train the rank-1 configuration this long (0: no; checkpointed every epoch)")
    parser.add_argument("--extend-seeds", type=int, nargs="+", default=[1234, 1235, 1236],
                        help="model seeds of the extension runs; default 1234 1235 1236")
    parser.add_argument("--phase", choices=("search", "retrain", "extend", "report", "all"), default="all",
                        help="search, retrain (needs the search), extend (needs the search), report (tables + "
                             "figure from finished runs only), or all (search, retrain, extend)")
    parser.add_argument("--out", type=Path, default=Path("runs/cornn_search"), help="folder of the runs")
    parser.add_argument("--figure", type=Path, default=Path("docs/figures/cornn_fhn_search.png"))
    parser.add_argument("--table", type=Path, default=None, help="also write the markdown table here")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads; default 1")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    data = TASKS["fhn"].load(1234)  # the paper's data seed; cached after the first call
    if args.phase == "report":
        records = [finished(args.out / "trials" / f"trial_{i:03d}.json", c, args.epochs, args.seed)
                   for i, c in enumerate(sample_configs(args.trials, args.search_seed))]
        records = [r for r in records if r is not None]
        if not records:
            print(f"no finished trials in {args.out}/trials for these settings", file=sys.stderr)
            return 1
        report(args, records, load_retrain(args, records), load_extend(args, records))
        return 0
    records = run_search(args, data)
    summaries, extended = load_retrain(args, records), load_extend(args, records)
    if args.phase in ("retrain", "all"):
        summaries = run_retrain(args, data, records)
    if args.phase in ("extend", "all"):
        extended = run_extend(args, data, records)
    report(args, records, summaries, extended)
    if extended is not None:
        print(f"rank 1 extended to {extended['epochs']} epochs: test {fmt(extended['test_mean'])} ± "
              f"{extended['test_std'] * 100:.3f} ×10⁻² over seeds {extended['seeds']} (best epochs "
              f"{extended['best_epochs']})")
    for s in summaries:
        print(f"#{s['rank']} trial {s['trial']}: {describe(s['config'])}: test {fmt(s['test_mean'])} ± "
              f"{s['test_std'] * 100:.3f} ×10⁻² over seeds {s['seeds']} (paper {PAPER_RMSE * 100:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
