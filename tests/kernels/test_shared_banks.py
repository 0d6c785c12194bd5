"""``benchmarks/shared_banks.py``: the shared-memory wavefronts of a PTX file's loads, lane by lane -- on hand-written
PTX whose bank pattern is known from the 32-bank rule, then on the cells' kernels compiled for sm_90 (no GPU)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "shared_banks.py"


@pytest.fixture(scope="module")
def banks():
    spec = importlib.util.spec_from_file_location("shared_banks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ptx(*lines: str) -> str:
    return "\n".join(["\tmov.u32 \t%r1, %tid.x;", *[f"\t{line};" for line in lines]])


@pytest.mark.parametrize("shift, expected", [
    (4, (4, 4)),  # 16 bytes a lane, consecutive: each group of 8 lanes covers the 32 banks once
    (9, (32, 4)),  # 512 bytes apart: a group's 8 lanes all on banks 0-3 -> 8 wavefronts a group, 4 groups
    (5, (8, 4)),  # 32 bytes apart: lanes 0 and 4 of a group share banks -> 2 a group
])
def test_sixteen_byte_loads_count_by_the_bank_rule(banks, shift, expected):
    ptx = _ptx(f"shl.b32 \t%r2, %r1, {shift}", "ld.shared.v4.b32 \t{%r3, %r4, %r5, %r6}, [%r2+16]")
    assert banks.wavefronts(ptx) == {"ld.v4": expected}


def test_broadcast_and_four_byte_loads(banks):
    """Lanes reading one word need one wavefront; 4-byte words 128 bytes apart put the 32 lanes on one bank."""
    same = _ptx("and.b32 \t%r2, %r1, 0", "ld.shared.b32 \t%r3, [%r2]")
    strided = _ptx("shl.b32 \t%r2, %r1, 7", "ld.shared.b32 \t%r3, [%r2]")
    assert banks.wavefronts(same) == {"ld": (1, 1)}
    assert banks.wavefronts(strided) == {"ld": (32, 1)}


def test_ldmatrix_rows(banks):
    """ldmatrix x4: lanes 8j … 8j + 7 address matrix j's rows; rows 16 bytes apart fill the banks, rows 64 bytes
    apart put lanes 0, 2, 4, 6 of each matrix on the same 4 banks."""
    packed = _ptx("shl.b32 \t%r2, %r1, 4", "ldmatrix.sync.aligned.m8n8.x4.shared.b16 \t{%r3, %r4, %r5, %r6}, [%r2]")
    spread = _ptx("shl.b32 \t%r2, %r1, 6", "ldmatrix.sync.aligned.m8n8.x4.shared.b16 \t{%r3, %r4, %r5, %r6}, [%r2]")
    assert banks.wavefronts(packed) == {"ldmatrix": (4, 4)}
    assert banks.wavefronts(spread) == {"ldmatrix": (16, 4)}


def test_address_arithmetic(banks):
    """bfe, and, shl and mad form the address as the hardware would: lane → ((lane >> 2) & 3) · 2048 + 16 (lane & 3)."""
    ptx = _ptx("bfe.u32 \t%r2, %r1, 2, 2", "and.b32 \t%r3, %r1, 3", "shl.b32 \t%r4, %r3, 4",
               "mad.lo.s32 \t%r5, %r2, 2048, %r4", "ld.shared.v4.b32 \t{%r6, %r7, %r8, %r9}, [%r5]")
    # a group of 8 lanes: 4 distinct 16-byte slots of one 2048-byte row, twice over rows 2048 bytes apart (same
    # banks): 2 words a bank
    assert banks.wavefronts(ptx) == {"ld.v4": (8, 4)}


def test_cells_kernels_read_their_weight_tiles_without_conflicts():
    """The weights-on-chip grid kernels at hidden 128 (LEM forward and backward, coRNN, GRU-ODE and τ-GRU forward),
    compiled for sm_90: their 16-byte loads and ldmatrix take no more wavefronts than the fewest -- their weight
    tiles read from the transposed copies. Read from W's own rows, LEM's forward took 5.7× as many."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    kernels = "lem-grid-forward,lem-grid-backward,cornn-grid-forward,gru-ode-grid-forward,taugru-grid-forward"
    result = subprocess.run([sys.executable, str(SCRIPT), "--kernels", kernels, "--check"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.count("(1.0×)") >= 10, result.stdout
    assert result.stdout.count("8 warps: ") == 5 and result.stdout.count(" registers, ") == 5, result.stdout


def test_loads_in_loops_apart(banks):
    """``in_loops``: only the loads between a label and a later branch back to it (a kernel's time loop), not the
    conflicted one after it."""
    ptx = "\n".join(["\tmov.u32 \t%r1, %tid.x;", "\tshl.b32 \t%r2, %r1, 4;", "$L__BB0_1:",
                     "\tld.shared.v4.b32 \t{%r3, %r4, %r5, %r6}, [%r2];", "\t@%p1 bra \t$L__BB0_1;",
                     "\tshl.b32 \t%r7, %r1, 9;", "\tld.shared.v4.b32 \t{%r3, %r4, %r5, %r6}, [%r7];"])
    assert banks.wavefronts(ptx) == {"ld.v4": (4 + 32, 4 + 4)}
    assert banks.wavefronts(ptx, in_loops=True) == {"ld.v4": (4, 4)}


def test_arithmetic_in_loops(banks):
    """``loop_instructions``: the exponentials, divisions, reciprocals and FMAs of the loops' lines only (a guarded
    one too), each body once."""
    ptx = "\n".join(["\tex2.approx.f32 \t%f1, %f2;", "$L__BB0_1:", "\tex2.approx.ftz.f32 \t%f3, %f1;",
                     "\t@%p2 div.rn.f32 \t%f4, %f3, %f1;", "\tfma.rn.f32 \t%f5, %f4, %f3, %f1;",
                     "\tfma.rn.f32 \t%f6, %f5, %f3, %f1;", "\t@%p1 bra \t$L__BB0_1;", "\trcp.rn.f32 \t%f7, %f6;"])
    assert banks.loop_instructions(ptx) == {"ex2": 1, "div": 1, "rcp": 0, "fma": 2}


def test_stores_and_their_address_syntax(banks):
    """``st.shared::cta`` with a spaced address and ``stmatrix`` count as their loads do."""
    ptx = _ptx("shl.b32 \t%r2, %r1, 7", "st.shared::cta.b32 [ %r2 + 0 ], %r3",
               "shl.b32 \t%r4, %r1, 4", "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r4], {%r5, %r6, %r7, %r8}")
    assert banks.wavefronts(ptx) == {"st": (32, 1), "stmatrix": (4, 4)}
