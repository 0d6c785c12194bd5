"""The GPU figures of one `gpu_session.sh` run as markdown, from its JSON (no number typed by hand).

    python benchmarks/gpu_tables.py benchmarks/results/h200_2026-11-26 benchmarks/results/h200_2026-11-25 \\
        [--readme README.md]

Folders newest first: the newest that measured a figure gives it (older ones are marked). Reads
cell_speed_cuda*.json (fused cells against cuDNN's nn.LSTM/nn.GRU, torch's default and with IEEE products; the
kernels' IEEE and, in *_tf32.json, TF32 products, in
*_tf32x3.json three TF32 products, in *_bf16.json bfloat16-rounded operands; with ``--captured``, each step
replayed from a CUDA graph too),
solvers_cuda.json (FitzHugh–Nagumo dopri5 against diffrax, torchdiffeq and torchode per batch size),
solvers_cuda_cold.json (first calls from empty caches), solvers_cuda_newconfig.json (a new batch size in a new process,
the caches warm), fit_cuda.json and fit_quick_cuda.json (FHN training runs), irregular_cuda_16.json and
irregular_cuda_128.json (per-sample gaps), dropout_cuda.json (the delay cells' state dropout),
kernel_trace_cuda_grid_variants.json (the grid kernels' opt-in variants) and the newest
gpu_session.log (the gpu tests' summary). With --readme,
replaces the text between ``<!-- gpu-figures:start -->`` and ``<!-- gpu-figures:end -->``; otherwise prints it.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

START, END = "<!-- gpu-figures:start -->", "<!-- gpu-figures:end -->"
SIZES = [(32, 1000, 16), (128, 1000, 128), (1024, 1000, 256)]


def products_of(path: Path) -> str:
    """The kernels' float32 products a cell_speed_cuda*.json measured, from its name."""
    return ("tf32x3" if "tf32x3" in path.name else "tf32" if "tf32" in path.name else "bf16" if "bf16" in path.name
            else "ieee")


def cell_rows(folders: list[Path], products: str) -> list[dict]:
    """Every fused/anchor row of the folders' cell_speed_cuda*.json with ``products`` ("ieee", "tf32", "tf32x3", "bf16";
    :func:`products_of`) (newest folder first), each tagged with its
    folder; the rows of the cells with several CUDA schedules named by the schedule they ran ("NAME-grid", …):
    up to hidden 32 the register-resident kernel whatever was asked, above it the schedule the row records (rows
    without one predate the stepwise schedule: persistent)."""
    rows = []
    for index, folder in enumerate(folders):
        for path in sorted(folder.glob("cell_speed_cuda*.json")):
            if products_of(path) != products or "generic" in path.name or "threads" in path.name:
                continue
            for row in json.loads(path.read_text())["rows"]:
                row = dict(row, folder=index)
                base, _, asked = row["model"].rpartition("-")
                if asked not in SCHEDULES:
                    base, asked = row["model"], None
                if base in STEPWISE:
                    ran = "persistent" if row["hidden"] <= 32 else (row.get("schedule") or asked or "persistent")
                    row["model"] = f"{base}-{ran}"
                rows.append(row)
    return rows


SCHEDULES = ("grid", "stepwise", "persistent")  # the CUDA default first
STEPWISE = {"lem", "cornn", "cornn-implicit", "oscillator", "gru-ode", "taugru", "delaygru", "ltc", "stc", "lrcu-a",
            "lrcu-s"}  # the cells with the stepwise and grid schedules
LABELS = {"lstm": "nn.LSTM (cuDNN)", "gru": "nn.GRU (cuDNN)", "lstm-ieee": "nn.LSTM (cuDNN, IEEE products)",
          "gru-ieee": "nn.GRU (cuDNN, IEEE products)", "flashrnn": "FlashRNN LSTM (Triton)"}


def captured_row(folders: list[Path], model: str, size: tuple) -> dict | None:
    """The newest IEEE row of ``model`` at ``size`` with a captured step (``cell_speed.py --captured``), if any."""
    return next((r for r in cell_rows(folders, "ieee") if r["model"] == model and r.get("fwd_bwd_captured_median_s")
                 and (r["batch"], r["time"], r["hidden"]) == size), None)


def label(model: str) -> str:
    if model.endswith("-grid"):
        return f"{model[:-5]}, grid-synchronised (the CUDA default)"
    for schedule, text in (("-persistent", "one launch (persistent; the default up to hidden 32)"),
                           ("-stepwise", "stepwise (a launch a phase)")):
        if model.endswith(schedule) and model[: -len(schedule)] in STEPWISE:
            return f"{model[: -len(schedule)]}, {text}"
    return LABELS.get(model, model)


def mark(folder: int) -> str:
    return "" if folder == 0 else " " + "¹²³⁴⁵⁶⁷⁸⁹"[folder - 1]


def cells_table(folders: list[Path]) -> str:
    ieee = cell_rows(folders, "ieee")
    others = [("TF32", cell_rows(folders, "tf32")), ("TF32x3", cell_rows(folders, "tf32x3")),
              ("BF16", cell_rows(folders, "bf16"))]
    find = lambda rows, model, size: next((r for r in rows if r["model"] == model
                                           and (r["batch"], r["time"], r["hidden"]) == size), None)
    models = list(dict.fromkeys(r["model"] for r in ieee))
    bases = list(dict.fromkeys(m.rpartition("-")[0] if m.rpartition("-")[2] in SCHEDULES else m for m in models))
    order = lambda m: (m.rpartition("-")[0], SCHEDULES.index(m.rpartition("-")[2])) if m.rpartition("-")[2] in \
        SCHEDULES else (m, -1)
    models.sort(key=lambda m: (m in LABELS, bases.index(order(m)[0]) if not m.startswith("lem") else -1, order(m)[1]))
    head = "| preset | " + " | ".join(f"({b}, {t}, {h})" for b, t, h in SIZES) + " |"
    lines = [head, "| --- |" + " --- |" * len(SIZES)]
    for model in models:
        cells = []
        for size in SIZES:
            r = find(ieee, model, size)
            if r is None:
                cell = "not measured"
            else:  # ratios against the nn.LSTM of the same run (and its IEEE-products run, where measured)
                ratio, strict = r.get("fwd_bwd_over_lstm"), r.get("fwd_bwd_over_lstm_ieee")
                cell = f"{1e3 * r['fwd_bwd_median_s']:.1f} ms"
                if ratio and model != "lstm":
                    cell += f" ({ratio:.2f}×" + (f"; {strict:.2f}× IEEE" if strict and model != "lstm-ieee" else "") + ")"
                if r["peak_memory_bytes"] is not None:
                    cell += f", {r['peak_memory_bytes'] / 2**20:.0f} MiB"
                if r.get("fwd_peak_memory_bytes") is not None:
                    cell += f" (forward {r['fwd_peak_memory_bytes'] / 2**20:.0f} MiB)"
                if r.get("fwd_bwd_back_to_back_median_s"):  # steps issued as a training loop issues them
                    ratio = r.get("fwd_bwd_back_to_back_over_lstm")
                    cell += (f"; back to back {1e3 * r['fwd_bwd_back_to_back_median_s']:.1f} ms"
                             + (f" ({ratio:.2f}×)" if ratio and model != "lstm" else ""))
                cell += mark(r["folder"])
            c = captured_row(folders, model, size)
            if c is not None:  # the step replayed from a CUDA graph (cell_speed.py --captured)
                ratio = c.get("fwd_bwd_captured_over_lstm_captured")
                cell += (f"; captured {1e3 * c['fwd_bwd_captured_median_s']:.2f} ms"
                         + (f" ({ratio:.2f}× the captured LSTM)" if ratio and model != "lstm" else "") + mark(c["folder"]))
            for name, rows in others:
                t = find(rows, model, size)
                if t is not None and model != "lstm":
                    ratio = t.get("fwd_bwd_over_lstm")
                    cell += f"; {name} {1e3 * t['fwd_bwd_median_s']:.1f} ms" + (f" ({ratio:.2f}×)" if ratio else "")
                    cell += mark(t["folder"])
            cells.append(cell)
        lines.append(f"| {label(model)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SOLVER_ROWS = ["odelab dopri5", "odelab dopri5 cuda graph", "odelab dopri5 torch loop", "diffrax dopri5 matched",
               "diffrax dopri5 (vmap)", "torchdiffeq dopri5", "torchode dopri5"]


def first(folders: list[Path], name: str) -> tuple[int, Path] | None:
    """(index, path) of the newest folder holding ``name``."""
    return next(((i, f / name) for i, f in enumerate(folders) if (f / name).exists()), None)


def solvers_table(folders: list[Path]) -> str:
    found = first(folders, "solvers_cuda.json")
    if found is None:
        return "not measured"
    index, path = found
    batches = json.loads(path.read_text())["fitzhugh_nagumo_by_batch"]
    lines = ["| solver | " + " | ".join(f"batch {b}" for b in batches) + " |", "| --- |" + " --- |" * len(batches)]
    for name in SOLVER_ROWS:
        cells = []
        for result in batches.values():
            row, matched = result["rows"].get(name), result["rows"].get("diffrax dopri5 matched")
            if row is None:
                cells.append("not run")
                continue
            cell = f"{row['seconds']:.3f} s"
            if matched and name != "diffrax dopri5 matched":
                cell += f" ({row['seconds'] / matched['seconds']:.2f}×)"
            cell += f", err {row['max_error']:.1e} at rtol {row['rtol']:g}"
            if "first_call_seconds" in row and name.startswith("odelab"):
                cell += f", first {row['first_call_seconds']:.2f} s"
            if name.startswith("diffrax dopri5 (vmap)"):
                cell += f", first (jit) {row['first_call_seconds']:.2f} s"
            cells.append(cell + mark(index))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cold_start(folders: list[Path], name: str = "solvers_cuda_cold.json") -> str:
    found = first(folders, name)
    if found is None:
        return "not measured"
    index, path = found
    result = next(iter(json.loads(path.read_text())["fitzhugh_nagumo_by_batch"].values()))
    odelab, diffrax = result["odelab_ladder"][0], result["rows"].get("diffrax dopri5 (vmap)")
    text = f"odelab's fused loop {odelab['first_call_seconds']:.2f} s (its steady state {odelab['seconds']:.2f} s)"
    if diffrax is not None:
        text += (f", diffrax {diffrax['first_call_seconds']:.2f} s, jit included (odelab "
                 f"{odelab['first_call_seconds'] / diffrax['first_call_seconds']:.2f}× diffrax)")
    return text + mark(index)


def tests_summary(folders: list[Path], leases: int = 2) -> str:
    """Every pytest run's summary (the grid step runs its own) and failed test in the logs of the newest ``leases``
    folders, an older one's marked."""
    parts = []
    for index, folder in enumerate(folders[:leases]):
        log = folder / "gpu_session.log"
        if not log.exists():
            continue
        text = log.read_text()
        runs = re.findall(r"=+ ((?:\d+ \w+, )*\d+ \w+)(?:, \d+ warnings?)? in [\d.]+s", text)
        failed = re.findall(r"^FAILED (\S+)", text, re.M)
        parts.append(("; ".join(runs) if runs else "not recorded")
                     + "".join(f"; failed: `{f.split('::')[-1]}`" for f in failed) + mark(index))
    return " — ".join(parts) or "not recorded"


def fit_summary(folders: list[Path]) -> str:
    found = first(folders, "fit_cuda.json")
    run = json.loads(found[1].read_text())["paper"] if found else None
    if run is None:
        return "not measured"
    return (f"{run['config']['epochs']} epochs in {run['train_seconds']:.1f} s of training ({run['wall_seconds']:.1f} s "
            f"wall, data included), test RMSE {run['test_rmse']:.2e}" + mark(found[0]))


def quick_fit(folders: list[Path]) -> str:
    found = first(folders, "fit_quick_cuda.json")
    if found is None:
        return "not measured"
    runs = json.loads(found[1].read_text())
    parts = [f"{name.split('-')[-1]} engine " + (f"{run['config']['epochs']} epochs, test RMSE {run['test_rmse']:.6e}"
                                                   if run else "not measured (cut at its time cap)")
             for name, run in runs.items()]
    done = [run for run in runs.values() if run]
    if len(done) == 2 and done[0]["config"]["epochs"] == done[1]["config"]["epochs"]:
        parts.append(f"difference {abs(done[0]['test_rmse'] - done[1]['test_rmse']):.1e}")
    return ", ".join(parts) + mark(found[0])


def enso_summary(folders: list[Path]) -> str:
    found = first(folders, "enso_cuda.json")
    if found is None:
        return "not measured"
    d = json.loads(found[1].read_text())
    text = f"{d['problem']['batch']} trajectories, rk4 dt {d['problem']['dt']:g} on [0, 400], float64: "
    parts = [f"eager {d['odelab']['median_seconds']:.3f} s (max error {d['odelab']['max_abs_error']:.1e})"]
    graph = d.get("odelab cuda graph")
    if graph:
        parts.append(f"`cuda_graph=True` {graph['median_seconds']:.3f} s (its first two calls, eager and captured, "
                     f"{graph['first_two_calls_seconds']:.1f} s)")
    compiled = d.get("odelab compiled")
    if compiled:
        parts.append(f"`compile=True` {compiled['median_seconds']:.3f} s (first call {compiled['first_call_seconds']:.1f} s)")
    parts.append(f"torchdde on {d['torchdde']['batch']} of them {d['torchdde']['median_seconds']:.1f} s "
                 f"(max error {d['torchdde']['max_abs_error']:.1e})")
    return text + ", ".join(parts) + mark(found[0])


def irregular_summary(folders: list[Path]) -> str:
    """Per-sample gaps on the Triton kernels (``irregular_cuda_<hidden>.json`` of ``gpu_session.sh irregular``): each
    cell with the gaps and on a regular grid, and the ratio of the first to cuDNN's LSTM reading the gap; with the
    gaps' gradient, under the default schedule and the persistent one."""
    parts = []
    for hidden in (16, 128):
        found = first(folders, f"irregular_cuda_{hidden}.json")
        if found is None:
            continue
        d = json.loads(found[1].read_text())
        seconds, ratio = d["seconds"], d["ratio_to_lstm"]
        cells = [name.split(", gaps, kernel")[0] for name in seconds if name.endswith(", gaps, kernel (auto)")]
        def learned(cell):
            auto, before = seconds.get(cell + ", gaps requiring grad (auto)"), seconds.get(
                cell + ", gaps requiring grad (persistent)")
            text = "" if auto is None else f"; the gaps' gradient too {auto * 1e3:.1f} ms"
            if before is not None:
                text += f" (the persistent schedule, before 2026-12-02: {before * 1e3:.1f} ms)"
            return text

        rows = ", ".join(f"{cell} {seconds[cell + ', gaps, kernel (auto)'] * 1e3:.1f} ms "
                         f"({ratio[cell + ', gaps, kernel (auto)']:.2f}×; regular grid "
                         f"{seconds[cell + ', regular grid, kernel'] * 1e3:.1f} ms{learned(cell)})" for cell in cells)
        anchor = seconds["nn.LSTM on [x, gap] (anchor)"]
        parts.append(f"{tuple(d['shape'])}: {rows}; nn.LSTM reading the gap {anchor * 1e3:.1f} ms" + mark(found[0]))
    return "; ".join(parts) if parts else "not measured"


def dropout_summary(folders: list[Path]) -> str:
    """State dropout on the delay cells' Triton kernels (``dropout_cuda.json`` of ``gpu_session.sh dropout``): each
    cell's training step on the kernels and on the generic loop, the first's ratio to cuDNN's LSTM."""
    found = first(folders, "dropout_cuda.json")
    if found is None:
        return "not measured"
    rows = json.loads(found[1].read_text())["rows"]
    size = (rows[0]["batch"], rows[0]["time"], rows[0]["hidden"])  # the first size the step measured
    step = {(r["model"], r["engine"]): r for r in rows if (r["batch"], r["time"], r["hidden"]) == size}
    parts = []
    for model in ("taugru-dropout", "delaygru-dropout", "taugru"):
        fused, generic = step.get((model, "fused")), step.get((model, "generic"))
        if fused is None:
            continue
        text = f"{model} {fused['fwd_bwd_median_s'] * 1e3:.1f} ms ({fused['fwd_bwd_over_lstm']:.2f}×)"
        if generic is not None:
            text += f", generic loop {generic['fwd_bwd_median_s'] * 1e3:.1f} ms"
        parts.append(text)
    lstm = step.get(("lstm", "torch"))
    return f"{size}: " + "; ".join(parts) + (f"; nn.LSTM {lstm['fwd_bwd_median_s'] * 1e3:.1f} ms" if lstm else "") + \
        mark(found[0])


def grid_variants(folders: list[Path]) -> str:
    """The newest kernel_trace_cuda_grid_variants.json (``gpu_session.sh barrier``: ``kernel_trace.py --grid``): per
    model and size, each variant's training step and its grid kernels' device time, against the default's."""
    found = first(folders, "kernel_trace_cuda_grid_variants.json")
    if found is None:
        return "not measured"
    rows = [r for r in json.loads(found[1].read_text())["rows"] if "wall_ms_median" in r]
    parts = []
    for key in dict.fromkeys((r["model"], r["batch"], r["time"], r["hidden"]) for r in rows if r.get("grid")):
        mine = {r["grid"]: r for r in rows if (r["model"], r["batch"], r["time"], r["hidden"]) == key and r.get("grid")}
        base = mine.get("default")
        kernels = lambda r: sum(k["ms_per_step"] for k in r["kernels"] if "_grid" in k["name"])
        cells = []
        for variant, r in mine.items():
            text = f"{variant} {r['wall_ms_median']:.1f} ms (grid kernels {kernels(r):.1f} ms"
            if base is not None and variant != "default" and kernels(base):
                text += f", {kernels(r) / kernels(base):.2f}× the default's"
            cells.append(text + ")")
        parts.append(f"{key[0]} ({key[1]}, {key[2]}, {key[3]}): " + "; ".join(cells))
    return "; ".join(parts) + mark(found[0]) if parts else "not measured"


def render(folders: list[Path]) -> str:
    meta = json.loads((folders[0] / "cell_speed_cuda.json").read_text())["meta"]
    legend = "; ".join(f"{mark(i).strip()} from `{f.as_posix()}`" for i, f in enumerate(folders) if i)
    args = " ".join(f.as_posix() for f in folders)
    return f"""{START}
GPU figures, generated by `python benchmarks/gpu_tables.py {args} --readme README.md` from those folders' JSON
(newest first; a figure from an older folder is marked{": " + legend if legend else ""}). One
{meta.get('cuda_device', 'GPU')} per lease, torch {meta['torch']}, Triton 3.6, fp32; a lease holds 15 minutes of
device time, so some cells are not measured.

`pytest -m gpu` at the newest leases: {tests_summary(folders)}.

`odelab fit fhn --model lem --preset paper --device cuda`: {fit_summary(folders)}. The quick preset (issue 13's
"same RMSE with either engine"): {quick_fit(folders)}.

Training step (forward + backward of a mean loss), fused engine, median of {meta['repeats']}, each sample synchronised
before and after (in the folders whose rows record `warm_steps`, right after that many untimed steps of the same
model; in the others, right after the other models' steps); in brackets the
ratio to cuDNN's nn.LSTM measured in the same run with torch's default, which lets cuDNN's RNNs use TF32 tensor
cores for float32 (`torch.backends.cudnn.rnn.fp32_precision = "tf32"`), and, from the folders that ran it, to the
same nn.LSTM with IEEE products ("IEEE", as odelab's kernels compute by default); peak memory of one step (and
of one forward under `torch.no_grad()`, where measured);
"TF32" with torch's float32 matmul switch on, "TF32x3" with three TF32 products (`ODELAB_FLOAT32_PRODUCTS=tf32x3`), "BF16" with bfloat16-rounded operands (`ODELAB_FLOAT32_PRODUCTS=bf16`), "back to back" the step's time among steps issued one after another without a synchronisation, as a training loop issues them (`cell_speed.py --back-to-back`, 3 steps, against cuDNN's LSTM timed alike), "captured" the same step recorded once as a CUDA graph and replayed (`cell_speed.py --captured`; against cuDNN's LSTM captured alike). Up to hidden 32 every schedule runs the same register-resident
kernel; from hidden 33 the grid-synchronised one is the default on CUDA (the stepwise one before 2026-11-26's
seventh session) for every preset but UnICORNN. The liquid cells (LTC, STC, LRCU) keep theirs up to hidden 16 and
from 17 run over synapse tiles since 2026-11-27 (the rows of older folders: their batch-block kernels):

{cells_table(folders)}

The grid kernels' opt-in variants (`kernel_trace.py --grid`, median of its steps; `ODELAB_GRID_GATES=stored`,
`ODELAB_GRID_WARPS=4`, LEM's `ODELAB_LEM_GRID=one-barrier`): {grid_variants(folders)}.

FitzHugh–Nagumo, float64 dopri5, [0, 400], 1001 outputs, max error against DOP853 (1e-12) over 128 trajectories,
odelab and diffrax each at the loosest tolerance that reaches the torch anchors' error; in brackets the ratio to
diffrax at matched error; first calls in a process whose Triton cache was already warm (the gpu tests had run):

{solvers_table(folders)}

First call of a new configuration from empty Triton and odelab caches (batch 1280, the tolerance ladder's first
rung): {cold_start(folders)}. A new configuration (batch 16384) in a new process whose Triton and odelab caches the
first one filled: {cold_start(folders, "solvers_cuda_newconfig.json")}.

ENSO delay oscillator (`benchmarks/enso_torchdde.py`): {enso_summary(folders)}.

Irregular sampling (`benchmarks/irregular.py --device cuda`: per-sample gaps on the Triton kernels, forward +
backward, median of 3; in brackets the ratio to cuDNN's nn.LSTM reading the gap as a feature):
{irregular_summary(folders)}.

State dropout on the delay cells' kernels (the τ-GRU paper's IMDB preset, τ = 1 step, p = 0.04; `gpu_session.sh
dropout`; forward + backward, median of 3, in brackets the ratio to cuDNN's nn.LSTM): {dropout_summary(folders)}.
{END}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", type=Path, nargs="+", help="result folders, newest first")
    parser.add_argument("--readme", type=Path, default=None)
    args = parser.parse_args()
    text = render(args.folders)
    if args.readme is None:
        print(text)
        return
    readme = args.readme.read_text()
    if START not in readme or END not in readme:
        raise SystemExit(f"{args.readme}: no {START} … {END} section to replace")
    before, rest = readme.split(START, 1)
    args.readme.write_text(before + text + rest.split(END, 1)[1])
    print(f"updated {args.readme}")


if __name__ == "__main__":
    main()
