"""Shared-memory bank conflicts of the CUDA kernels, read from their sm_90 PTX (no GPU needed).

    python benchmarks/shared_banks.py [--kernels lem-grid-forward,cornn-grid-forward] [--out FILE] [--check]

Each kernel is compiled for sm_90 by Triton (``triton.compile``; ``TRITON_INTERPRET`` is ignored here) and its PTX
run, for the 32 lanes of warp 0, through a small integer evaluator of the instructions that form addresses (mov,
add, shl, and, or, xor, bfe, mad, ...; the shared-memory base taken as 0). Every shared-memory access it can place
(``ld.shared`` / ``st.shared`` of 4, 8 or 16 bytes, ``ldmatrix`` / ``stmatrix`` x4) is then counted in wavefronts
the way the hardware serves them: 16 bytes a lane eight lanes at a time, 8 bytes sixteen, 4 bytes all 32, a matrix
instruction one 8 × 16-byte matrix at a time, each group taking as many wavefronts as the most distinct 4-byte words
one of the 32 banks holds. The report gives, per kernel and kind of access, the wavefronts of one pass over its
loops' code (a loop body counted once; the JSON has the whole kernel's too) against the fewest the same accesses
could take, their sum over the program's warps (one program a multiprocessor in the grid schedule: at one wavefront
a cycle, the cycles a step's shared-memory accesses take), the registers and spills of a thread (``ptxas -v``) and
how many exponentials (``ex2``), divisions, reciprocals and FMAs its loops' code holds (each loop body once).
The kernels include the opt-in variants (``-stored-gates``: ``ODELAB_GRID_GATES=stored``; ``-4-warps``:
``ODELAB_GRID_WARPS=4``) and LEM's and τ-GRU's streamed backward at (1024, ·, 256)'s 64-row blocks. Why it matters:
LEM's grid forward at hidden 128 took 19.8 µs a step on an H200 (2026-12-04) while its PTX made 4352 wavefronts a
warp a step, 5.7× a conflict-free 768 -- at one wavefront a cycle for the multiprocessor's 8 warps, 17.6 µs. The
counts of today's kernels (Triton 3.6, the GPU image's): ``benchmarks/results/shared_banks.json``. ``--check`` exits
1 if a kernel's 16-byte or matrix accesses in its loops take more than the fewest (a tile read against the banks).
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

MASK = (1 << 32) - 1
BANKS = 32


def _operands(text: str) -> list[str]:
    return [a.strip() for a in re.split(r",(?![^{]*})", text)] if text else []


def loop_lines(ptx: str) -> set[int]:
    """The line numbers inside a loop: between a label and a later branch back to it."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"\s*(\$L__\w+):", line))}
    inside: set[int] = set()
    for i, line in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+)", line)
        if m and labels.get(m.group(1), i) < i:
            inside.update(range(labels[m.group(1)], i + 1))
    return inside


ARITHMETIC = {"ex2": ("ex2.",), "div": ("div.",), "rcp": ("rcp.",), "fma": ("fma.",)}  # counted in loops' code


def loop_instructions(ptx: str) -> dict[str, int]:
    """How many instructions of each kind of :data:`ARITHMETIC` the loops' lines of ``ptx`` hold (a body once;
    the special-function unit's ex2 and the divisions' and reciprocals' sequences, against the FMAs)."""
    lines = ptx.splitlines()
    counts = dict.fromkeys(ARITHMETIC, 0)
    for i in sorted(loop_lines(ptx)):
        words = [w for w in lines[i].split() if not w.startswith("@")]  # a predicate guard before the opcode
        opcode = words[0] if words else ""
        for kind, prefixes in ARITHMETIC.items():
            counts[kind] += opcode.startswith(prefixes)
    return counts


def lane_accesses(ptx: str, lane: int) -> list[tuple[str, int, int]]:
    """(instruction, byte address, line number) of every shared-memory access whose address the evaluator can form,
    in program order, for thread ``lane`` of the first warp (%tid.x = lane, %ctaid = 0, shared base 0)."""
    env: dict[str, int] = {"%tid.x": lane}
    out = []

    def value(a: str) -> int:
        a = a.strip()
        if a in env:
            return env[a]
        if re.fullmatch(r"-?\d+", a):
            return int(a)
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", a):
            return int(a, 16)
        raise KeyError(a)

    for number, raw in enumerate(ptx.splitlines()):
        line = raw.split("//")[0].strip().rstrip(";")
        if not line or line[0] in ".${}":
            continue
        if line.startswith("@"):  # predicated: evaluated as if taken (address arithmetic is rarely predicated)
            line = line.split(None, 1)[1]
        op, _, rest = line.partition(" ")
        args = _operands(rest)
        base = op.split(".")[0]
        try:
            if base in ("ldmatrix", "stmatrix") or (base in ("ld", "st") and ".shared" in op):
                m = re.search(r"\[\s*(%r\d+)\s*(?:\+\s*(-?\d+)\s*)?\]", line)
                if m and m.group(1) in env:
                    out.append((op, env[m.group(1)] + int(m.group(2) or 0), number))
                continue
            if not args:
                continue
            d = args[0]
            if base == "mov":
                src = args[1]
                env[d] = 0 if src in ("global_smem",) or src.startswith("%ctaid") else value(src)
            elif base == "and":
                env[d] = value(args[1]) & value(args[2])
            elif base == "or":
                env[d] = value(args[1]) | value(args[2])
            elif base == "xor":
                env[d] = value(args[1]) ^ value(args[2])
            elif base == "shl":
                env[d] = (value(args[1]) << value(args[2])) & MASK
            elif base == "shr":
                env[d] = value(args[1]) >> value(args[2])
            elif base == "add":
                env[d] = (value(args[1]) + value(args[2])) & MASK
            elif base == "sub":
                env[d] = (value(args[1]) - value(args[2])) & MASK
            elif base == "mul" and ".lo" in op:
                env[d] = (value(args[1]) * value(args[2])) & MASK
            elif base == "mad" and ".lo" in op:
                env[d] = (value(args[1]) * value(args[2]) + value(args[3])) & MASK
            elif base == "bfe":
                v, start, length = (value(a) for a in args[1:4])
                env[d] = (v >> start) & ((1 << length) - 1)
            elif base == "cvt":
                env[d] = value(args[1])
        except (KeyError, IndexError, ValueError):  # not an address the evaluator forms (floats, loads, ...)
            if args:
                env.pop(args[0], None)
    return out


def _wavefronts(addresses: list[int], width: int) -> int:
    """Wavefronts of one group of lanes' accesses of ``width`` bytes each: the most distinct words one bank holds."""
    words = defaultdict(set)
    for a in addresses:
        for w in range(a // 4, a // 4 + width // 4):
            words[w % BANKS].add(w)
    return max(len(v) for v in words.values())


def wavefronts(ptx: str, in_loops: bool = False) -> dict[str, tuple[int, int]]:
    """Per kind of shared-memory access ("ld.v4", "ld.v2", "ld", "ldmatrix", the same for "st", "stmatrix"):
    (wavefronts of warp 0 over one pass of the code, the fewest those accesses could take); ``in_loops``: those
    inside a loop only (a kernel's time step), not those before or after it."""
    lanes = [lane_accesses(ptx, lane) for lane in range(32)]
    count = min(len(a) for a in lanes)
    inside = loop_lines(ptx) if in_loops else None
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for i in range(count):
        op = lanes[0][i][0]
        if inside is not None and lanes[0][i][2] not in inside:
            continue
        addresses = [a[i][1] for a in lanes]
        if op.startswith(("ldmatrix", "stmatrix")):  # x4: lanes 8j … 8j + 7 give matrix j's eight 16-byte rows
            kind, groups, width = op.split(".")[0], [addresses[8 * j: 8 * j + 8] for j in range(4)], 16
        else:
            width = (16 if ".v4" in op else 8 if ".v2" in op else 4) * (2 if ".b64" in op or ".f64" in op else 1)
            width = min(width, 16)
            per = 128 // width  # lanes one wavefront can serve
            kind = op.split(".")[0] + (".v4" if width == 16 else ".v2" if width == 8 else "")
            groups = [addresses[p: p + per] for p in range(0, 32, per)]
        totals[kind][0] += sum(_wavefronts(g, width) for g in groups)
        totals[kind][1] += len(groups)
    return {k: (v[0], v[1]) for k, v in totals.items()}


# -- the kernels ---------------------------------------------------------------------------------------------

def _jobs() -> dict[str, tuple]:
    """name -> (kernel, constexprs): the weights-on-chip grid kernels at hidden 128 (the issue's (128, 1000, 128)),
    the streamed grid drivers (hidden > 128) and the one-launch resident kernels (hidden ≤ 32), IEEE float32; the
    liquid cells' synapse tiles and resident kernels; UnICORNN's (elementwise)."""
    from odelab.kernels.cuda import delay_gru, gru, lem, liquid, oscillators, unicornn

    on_chip = dict(HP=128, BB=16, BH=16, LIMIT=1 << 22, PRECISION="ieee", num_warps=8)
    streamed = dict(BB=16, BH=32, LIMIT=1 << 22, PRECISION="ieee", num_warps=8)
    resident = dict(BB=16, BH=32, PRECISION="ieee", num_warps=8)
    names = ("NE", "HAS_U", "HAS_Z", "HAS_G", "HAS_A", "U_DELAYED", "EU", "EZ", "EG", "EA", "WU", "WG", "WA")
    tau = dict(zip(names, (4, True, True, True, True, False, 0, 1, 2, 3, 0, 1, 2)), DROP=False)
    bj, bi = liquid.SYNAPSE_TILES[-1]  # the liquid cells' synapse tiles (their CUDA default from hidden 17)
    ra, rc = liquid.phase_rows(bj, bi, 1 << 20)
    tiles = dict(BJ=bj, BI=bi, RA=ra, RC=rc, E=liquid.ELEMENTS, LIMIT=1 << 22, num_warps=liquid.THREADS // 32)
    ltc = dict(MODE=0, L=6, GAPS=False, DHS=False)
    lrc = dict(MODE=2, L=1, GAPS=False, DHS=False)  # LRCU-A
    hb, rc, re_ = liquid.slab_chunks(32, 256, 64)
    slabs = dict(BJ=32, HB=hb, RC=rc, RE=re_, LIMIT=1 << 22, num_warps=liquid.THREADS // 32,
                 ints={"B", "T", "H", "RS", "n"})
    ltc_slab = dict(MODE=0, L=6, GAPS=False, STORED=False)
    rows = 16  # the one-launch register-resident liquid kernels (hidden ≤ 16)
    liquid_resident = dict(BB=rows, BH=liquid.RESIDENT_H, BJ=liquid.block_j(liquid.RESIDENT_H), PRECISION="ieee",
                           num_warps=liquid.resident_warps(rows))
    jobs = {
        "lem-grid-forward": (lem._lem_grid_forward, dict(on_chip, GAPS=False)),
        "lem-grid-backward": (lem._lem_grid_backward, dict(on_chip, GAPS=False, DHS=False)),
        "lem-grid-backward-stored-gates": (lem._lem_grid_backward, dict(on_chip, GAPS=False, DHS=False, STORED=True)),
        "lem-streamed-forward": (lem._lem_grid, dict(streamed, BACKWARD=False, GAPS=False, DHS=False)),
        "lem-resident-forward": (lem._lem_forward_resident, dict(resident, GAPS=False)),
        "cornn-grid-forward": (oscillators._grid_forward, dict(on_chip, MODE=1, GAPS=False)),
        "cornn-grid-backward": (oscillators._grid_backward, dict(on_chip, MODE=1, GAPS=False, DHS=False)),
        "cornn-grid-backward-stored-gates": (oscillators._grid_backward,
                                             dict(on_chip, MODE=1, GAPS=False, DHS=False, STORED=True)),
        "gru-ode-grid-forward": (gru._grid_forward, dict(on_chip, GAPS=False)),
        "gru-ode-grid-backward": (gru._grid_backward, dict(on_chip, GAPS=False, DHS=False)),
        "gru-ode-grid-backward-stored-gates": (gru._grid_backward, dict(on_chip, GAPS=False, DHS=False, STORED=True)),
        "taugru-grid-forward": (delay_gru._grid_forward, dict(on_chip, **tau)),
        "taugru-grid-backward": (delay_gru._grid_backward, dict(on_chip, **tau, ED=1, HAS_D=True)),
        "taugru-grid-backward-stored-gates": (delay_gru._grid_backward,
                                              dict(on_chip, **tau, ED=1, HAS_D=True, STORED=True)),
        # LEM's and τ-GRU's step kernels where the weights stream (hidden 256 at batch 1024: 64-row blocks, 32 wide)
        "lem-streamed-backward": (lem._lem_grid, dict(streamed, BB=64, BACKWARD=True, GAPS=False, DHS=False)),
        "lem-streamed-backward-stored-gates": (lem._lem_grid, dict(streamed, BB=64, BACKWARD=True, GAPS=False,
                                                                   DHS=False, STORED=True)),
        "taugru-streamed-backward": (delay_gru._grid, dict(streamed, BB=64, BACKWARD=True, **tau, ED=1, HAS_D=True)),
        "taugru-streamed-backward-stored-gates": (delay_gru._grid, dict(streamed, BB=64, BACKWARD=True, **tau, ED=1,
                                                                        HAS_D=True, STORED=True)),
        "ltc-synapse-tiles-forward": (liquid._grid, dict(tiles, BACKWARD=False, **ltc)),
        "ltc-synapse-tiles-backward": (liquid._grid, dict(tiles, BACKWARD=True, **ltc)),
        "ltc-synapse-tiles-backward-stored-gates": (liquid._grid, dict(tiles, BACKWARD=True, **ltc, STORED=True)),
        "lrcu-synapse-tiles-backward": (liquid._grid, dict(tiles, BACKWARD=True, **lrc)),
        "lrcu-synapse-tiles-backward-stored-gates": (liquid._grid, dict(tiles, BACKWARD=True, **lrc, STORED=True)),
        # the row slabs (ODELAB_LIQUID_LAYOUT=rows) at (1024, ·, 256): 32 presynaptic neurons, 64 rows a slab
        "ltc-row-slabs-forward": (liquid._slab_grid, dict(slabs, **ltc_slab)),
        "ltc-row-slabs-backward": (liquid._slab_backward_grid, dict(slabs, **ltc_slab, RD=1, DHS=False, KEEP=False)),
        "ltc-row-slabs-backward-stored-gates": (liquid._slab_backward_grid,
                                                dict(slabs, **dict(ltc_slab, STORED=True), RD=1, DHS=False, KEEP=False)),
        "ltc-resident-forward": (liquid._forward_resident, dict(liquid_resident, MODE=0, L=6, GAPS=False)),
        "ltc-resident-backward": (liquid._backward_resident, dict(liquid_resident, MODE=0, L=6, GAPS=False, DHS=False)),
        "unicornn-forward": (unicornn._forward, dict(BLOCK=unicornn.BLOCK)),
        "unicornn-backward": (unicornn._backward, dict(BLOCK=unicornn.BLOCK)),
    }
    for name in ("lem-grid-forward", "lem-grid-backward", "lem-grid-backward-stored-gates", "cornn-grid-forward",
                 "cornn-grid-backward", "cornn-grid-backward-stored-gates", "gru-ode-grid-forward",
                 "gru-ode-grid-backward", "gru-ode-grid-backward-stored-gates", "taugru-grid-forward",
                 "taugru-grid-backward", "taugru-grid-backward-stored-gates"):  # ODELAB_GRID_WARPS=4
        fn, constexprs = jobs[name]
        jobs[name + "-4-warps"] = (fn, dict(constexprs, num_warps=4))
    return jobs


def usage(ptx: str) -> dict | None:
    """Registers a thread and bytes it spills (stores to local memory) of a kernel's PTX, from ``ptxas -v`` of
    Triton's bundled compiler for the PTX's own target; None where that ptxas is not found."""
    import subprocess
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    target = re.search(r"^\.target\s+sm_(\d+)\w*", ptx, re.M)
    if target is None:
        return None
    ptxas = Path(get_ptxas(int(target.group(1))).path)  # the one Triton compiles that target with
    if not ptxas.exists():
        return None
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        report = subprocess.run([str(ptxas), f"-arch={target.group(0).split()[-1]}", "-v", str(source), "-o",
                                 str(Path(folder) / "kernel.cubin")], capture_output=True, text=True)
    text = report.stdout + report.stderr
    registers, spilled = re.search(r"Used (\d+) registers", text), re.search(r"(\d+) bytes spill stores", text)
    if registers is None:
        return None
    return {"registers": int(registers.group(1)), "spill_bytes": int(spilled.group(1)) if spilled else 0}


def compile_ptx(fn, constexprs: dict, dtype: str = "fp32") -> str:
    """``fn``'s PTX for sm_90 (Triton's bundled compiler; no GPU): ``constexprs`` its compile-time arguments, with
    ``num_warps`` and, optionally, ``ints`` (the names of its int32 arguments, by default the kernels' B, T, H, ...);
    the others are pointers to ``dtype`` (TABLE to int64, SYNC to int32). The sm_90 compile test uses it too."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constexprs = dict(constexprs)
    num_warps = constexprs.pop("num_warps", 4)
    for p in fn.params:  # the defaults of the constexpr options not given (a pointer defaulting to None: a pointer)
        if p.name not in constexprs and p.is_constexpr and p.default is not inspect._empty:
            constexprs[p.name] = p.default
    ints = constexprs.pop("ints", {"B", "T", "H", "P", "NX", "M", "n", "STEPS"})
    signature = {a: "constexpr" if a in constexprs else "i32" if a in ints else "*i64" if a == "TABLE" else
                 "*i32" if a == "SYNC" else "*" + dtype for a in fn.arg_names}
    source = ASTSource(fn=fn, signature=signature,
                       constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["ptx"]


def main() -> None:
    jobs = _jobs()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", default=",".join(jobs), help=f"comma separated, of: {', '.join(jobs)}")
    parser.add_argument("--out", default=None, help="a JSON of the counts")
    parser.add_argument("--check", action="store_true", help="exit 1 where 16-byte or matrix accesses conflict")
    args = parser.parse_args()
    names = [n.strip() for n in args.kernels.split(",") if n.strip()]
    unknown = [n for n in names if n not in jobs]
    if unknown:
        parser.error(f"--kernels: unknown {unknown}; choose from {', '.join(jobs)}")
    rows, conflicted = [], []
    for name in names:
        fn, constexprs = jobs[name]
        ptx = compile_ptx(fn, constexprs)
        counts, looped = wavefronts(ptx), wavefronts(ptx, in_loops=True)
        warps = constexprs.get("num_warps", 4)
        used = usage(ptx)
        arithmetic = loop_instructions(ptx)
        rows.append({"kernel": name, "wavefronts": {k: {"taken": t, "fewest": f} for k, (t, f) in counts.items()},
                     "in_loops": {k: {"taken": t, "fewest": f} for k, (t, f) in looped.items()}, "warps": warps,
                     "in_loops_per_multiprocessor": warps * sum(t for t, _ in looped.values()),
                     "in_loops_instructions": arithmetic, **(used or {})})
        shown = ", ".join(f"{k} {t} / {f} ({t / f:.1f}×)" for k, (t, f) in sorted(looped.items())) or "no shared access"
        extra = f"; {warps} warps: {rows[-1]['in_loops_per_multiprocessor']} a multiprocessor"
        if used:
            extra += f", {used['registers']} registers, {used['spill_bytes']} bytes spilled"
        extra += "; in loops " + " ".join(f"{k} {v}" for k, v in arithmetic.items())
        print(f"{name:38s} in loops: {shown}{extra}", flush=True)
        if any(t > f for k, (t, f) in looped.items() if k in ("ld.v4", "ldmatrix", "st.v4", "stmatrix")):
            conflicted.append(name)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        import triton

        meta = {"triton": triton.__version__, "target": "cuda sm_90 (PTX, warp 0)", "unit": "wavefronts a pass",
                "in_loops_per_multiprocessor": "the loops' wavefronts of every warp of a program (one program a "
                                               "multiprocessor in the grid schedule), all kinds",
                "registers": "ptxas -v of Triton's bundled ptxas, a thread",
                "in_loops_instructions": "instructions of the loops' code, each body once (PTX opcodes ex2.*, "
                                         "div.*, rcp.*, fma.*)"}
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    if args.check and conflicted:
        print(f"bank conflicts in: {', '.join(conflicted)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)  # compiled, not interpreted (before triton is imported)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
