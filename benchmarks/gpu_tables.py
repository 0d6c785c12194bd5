"""The GPU figures of one `gpu_session.sh` run as markdown, from its JSON (no number typed by hand).

    python benchmarks/gpu_tables.py benchmarks/results/h200_2026-11-25 [--readme README.md]

Reads cell_speed_cuda*.json (fused cells against cuDNN's nn.LSTM/nn.GRU, IEEE and, in *_tf32.json, TF32
products; the first file naming a (model, size) gives its row),
solvers_cuda.json (FitzHugh–Nagumo dopri5 against diffrax, torchdiffeq and torchode per batch size),
fit_cuda.json (the FHN training run) and gpu_session.log (the gpu tests' summary). With --readme, replaces the
text between ``<!-- gpu-figures:start -->`` and ``<!-- gpu-figures:end -->``; otherwise prints it.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

START, END = "<!-- gpu-figures:start -->", "<!-- gpu-figures:end -->"
SIZES = [(32, 1000, 16), (128, 1000, 128), (1024, 1000, 256)]


def cell_rows(paths) -> list[dict]:
    return [row for path in sorted(paths) for row in json.loads(path.read_text())["rows"]]


def cells_table(folder: Path) -> tuple[str, dict]:
    ieee = cell_rows(p for p in folder.glob("cell_speed_cuda*.json")
                     if "tf32" not in p.name and "generic" not in p.name)
    tf32 = cell_rows(folder.glob("cell_speed_cuda_tf32.json"))
    meta = json.loads((folder / "cell_speed_cuda.json").read_text())["meta"]
    find = lambda rows, model, size: next((r for r in rows if r["model"] == model
                                           and (r["batch"], r["time"], r["hidden"]) == size), None)
    models = list(dict.fromkeys(r["model"] for r in ieee))
    head = "| preset | " + " | ".join(f"({b}, {t}, {h})" for b, t, h in SIZES) + " |"
    lines = [head, "| --- |" + " --- |" * len(SIZES)]
    for model in models:
        cells = []
        for size in SIZES:
            r, lstm, t = find(ieee, model, size), find(ieee, "lstm", size), find(tf32, model, size)
            if r is None:
                cell = "not measured"
            else:
                ratio = r["fwd_bwd_median_s"] / lstm["fwd_bwd_median_s"] if lstm else None
                cell = f"{1e3 * r['fwd_bwd_median_s']:.1f} ms" + (f" ({ratio:.2f}×)" if ratio and model != "lstm" else "")
                if r["peak_memory_bytes"] is not None:
                    cell += f", {r['peak_memory_bytes'] / 2**20:.0f} MiB"
            if t is not None and model != "lstm":
                lstm_t = find(tf32, "lstm", size)
                cell += f"; TF32 {1e3 * t['fwd_bwd_median_s']:.1f} ms" + (
                    f" ({t['fwd_bwd_median_s'] / lstm_t['fwd_bwd_median_s']:.2f}×)" if lstm_t else "")
            cells.append(cell)
        label = {"lstm": "nn.LSTM (cuDNN)", "gru": "nn.GRU (cuDNN)",
                 "flashrnn": "FlashRNN LSTM (Triton)"}.get(model, model)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines), meta


SOLVER_ROWS = ["odelab dopri5", "odelab dopri5 cuda graph", "odelab dopri5 torch loop", "diffrax dopri5 matched",
               "diffrax dopri5 (vmap)", "torchdiffeq dopri5", "torchode dopri5"]


def solvers_table(folder: Path) -> tuple[str, dict]:
    data = json.loads((folder / "solvers_cuda.json").read_text())
    batches = data["fitzhugh_nagumo_by_batch"]
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
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines), data["meta"]


def tests_summary(folder: Path) -> str:
    log = (folder / "gpu_session.log").read_text()
    match = re.search(r"=+ ((?:\d+ \w+, )*\d+ \w+)(?:, \d+ warnings?)? in [\d.]+s", log)
    return match.group(1) if match else "not recorded"


def fit_summary(folder: Path) -> str:
    run = json.loads((folder / "fit_cuda.json").read_text())["paper"]
    if run is None:
        return "not measured"
    return (f"{run['config']['epochs']} epochs in {run['train_seconds']:.1f} s of training ({run['wall_seconds']:.1f} s "
            f"wall, data included), test RMSE {run['test_rmse']:.2e}")


def render(folder: Path) -> str:
    cells, cell_meta = cells_table(folder)
    solvers, solver_meta = solvers_table(folder)
    return f"""{START}
GPU figures, generated by `python benchmarks/gpu_tables.py {folder.as_posix()} --readme README.md` from that
folder's JSON (one {cell_meta.get('cuda_device', 'GPU')}, torch {cell_meta['torch']}, Triton 3.6; fp32; one lease of
15 minutes, so some cells are not measured).

`pytest -m gpu` (Triton 3.6 on the machine): {tests_summary(folder)} — every failure a float64 kernel that Triton 3.6
would not compile (fixed since: all 266 variants compile for sm_90 under 3.6 and 3.9, not rerun on a GPU), plus the
neural oscillator under TF32 and UnICORNN's reversible backward in float32 (see `tests/kernels/test_cuda_kernels.py`).

`odelab fit fhn --model lem --preset paper --device cuda`: {fit_summary(folder)}.

Training step (forward + backward of a mean loss), fused engine, median of {cell_meta['repeats']}; in brackets the
ratio to cuDNN's nn.LSTM of the same size (which runs with cuDNN's default `allow_tf32=True`); peak memory of one
step; "TF32" with torch's float32 matmul switch on:

{cells}

FitzHugh–Nagumo, float64 dopri5, [0, 400], 1001 outputs, max error against DOP853 (1e-12) over 128 trajectories,
odelab and diffrax each at the loosest tolerance that reaches the torch anchors' error; in brackets the ratio to
diffrax at matched error; first calls in a process whose Triton cache was already warm (the gpu tests had run):

{solvers}
{END}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--readme", type=Path, default=None)
    args = parser.parse_args()
    text = render(args.folder)
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
