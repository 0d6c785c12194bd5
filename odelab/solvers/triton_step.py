"""The adaptive loop's arithmetic around the vector field as Triton kernels: the CUDA counterpart of
:mod:`.fused_step` for solves that record no gradient. An attempted step costs the field's evaluations plus
``stages`` launches -- where the torch loop launches ~100 small kernels -- and the host reads the loop condition
once per ``chunk`` attempts (finished samples stay in place inside a chunk), so the stream does not wait on the CPU
in between.

- :func:`_stage` (one launch per stage i ≥ 1, over the B·D elements): the step clipped onto the sample's next
  landing point, h = min(h, target − t), and Y_i = y + Σ_j a_ij (h k_j), the stage time t + c_i h (state dtype;
  float64 too where the field reads exact times);
- :func:`_finish` (one launch per attempt, a program per 16 samples, the state's width in tiles): err =
  Σ_i b_err_i (h k_i), the RMS ratio, accept, the PI controller, the failure codes, the continuous-extension
  coefficients C_p = Σ_i P_ip (h k_i), the outputs inside each accepted step (y + θ (C_1 + θ (C_2 + …)) with
  fused multiply-adds, as the torch loop's addcmul) and the new (y, k1, t, h, …), in place: the equations of
  :mod:`.adaptive`, as :mod:`.fused_step`'s ``rk_finish`` computes them.

The values agree with the torch loop to round-off and the steps are the same (float64) except where the
controller amplifies round-off. Tableau numbers and tolerances are read from float64 tensors (a Python float
argument would be float32). Any input and ``jump_times``: where f jumps, the samples sitting on a jump
re-evaluate their first stage as in the torch loop's chunks (f evaluated batch-wide every attempt, masked, no host
read). Delay systems: the dense history is :class:`TritonHistory`, per-sample rings of accepted steps that
:func:`_finish` pushes onto and :func:`_history` reads (:mod:`.fused_step`'s rings on the GPU); a ring grows at a
chunk boundary when the chunk's pushes could overwrite a record still needed (one host read per chunk, with the
loop condition). A learnable delay's forward-mode sensitivity keeps the torch loop. Triton is imported with this module, which
:mod:`.adaptive` loads only for CUDA tensors; the kernels' logic runs on CPU tensors under Triton's interpreter
(``TRITON_INTERPRET=1``), which is how the tests check it without a GPU.
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Callable

import torch
import triton
import triton.language as tl
from torch import Tensor

from .cache import keep_triton_code
from .cuda_graph import capture as _capture, capturing as _capturing, warm_up as _warm_up
from .dense import StepCopies
from .fused_step import RingHistory, records_gradient
from .solution import Status
from .tableau import horner

keep_triton_code()  # compiled kernels outlive the process: a later one loads them

_SUCCESS, _UNDERFLOW, _NONFINITE, _MAX_STEPS = (int(s) for s in (Status.SUCCESS, Status.STEP_UNDERFLOW,
                                                                  Status.NONFINITE, Status.MAX_STEPS))
_MAX_STAGES = 7  # pointer arguments K0 … K6 (dopri5 and tsit5 have 7 stages)
_ELEMENTS = 1024  # elements per program of the stage kernel
_ROWS = 16  # samples per program of the finish kernel


class KernelFailure(RuntimeError):
    """A kernel failed to compile or launch: the caller reruns the segment with the torch loop."""


_FAILURE: str | None = None  # why the kernels failed in this process (then every later solve takes the torch loop)


def usable(solver, y: Tensor, k1: Tensor) -> bool:
    """Whether the Triton loop can run this solve: CUDA (or CPU tensors under Triton's interpreter), float32 or
    float64, not compiled, no gradient to record (nor a delay sensitivity), no kernel failure so far, and not
    switched off (``ODELAB_GPU_KERNELS=0``)."""
    if _FAILURE is not None or os.environ.get("ODELAB_GPU_KERNELS", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if solver.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return False
    if solver.dtype not in (torch.float32, torch.float64) or solver.sensitive \
            or solver.state_dependent or solver.resets is not None:
        return False
    if solver.compiled is not None or solver.tab.stages > _MAX_STAGES:
        return False
    return not records_gradient(solver, y, k1)


# the kernels' constants
_SUCCESS_CODE: tl.constexpr = tl.constexpr(_SUCCESS)
_UNDERFLOW_CODE: tl.constexpr = tl.constexpr(_UNDERFLOW)
_NONFINITE_CODE: tl.constexpr = tl.constexpr(_NONFINITE)
_MAX_STEPS_CODE: tl.constexpr = tl.constexpr(_MAX_STEPS)
_INF: tl.constexpr = tl.constexpr(math.inf)
_LOG_FLOOR: tl.constexpr = tl.constexpr(math.log(1e-8))  # the controller's floor on log ratio² (dopri5.f)


@triton.jit
def _clipped_step(T, H, LANDING, POINTS, rows, mask):
    """Per sample: (t, h, the step clipped onto its landing point, whether it lands there, the time after it)."""
    t = tl.load(T + rows, mask=mask, other=0.0)
    h = tl.load(H + rows, mask=mask, other=0.0)
    target = tl.load(POINTS + tl.load(LANDING + rows, mask=mask, other=0), mask=mask, other=0.0)
    gap = target - t
    landed = (h >= gap) | (t + h >= target)
    h_step = tl.minimum(h, gap, propagate_nan=tl.PropagateNan.ALL)
    t_land = tl.where(landed, target, t + h_step)
    return t, h, h_step, landed, t_land


@triton.jit
def _weighted_term(acc, TAB, index, K, e, mask, hs):
    """acc + w (h k), w = TAB[index] (a float64 tableau number, in the state's dtype); acc itself where w = 0 (the CPU
    kernel skips zero weights)."""
    w = tl.load(TAB + index)
    k = tl.load(K + e, mask=mask, other=0.0)
    return tl.where(w != 0.0, acc + w.to(k.dtype) * (hs * k), acc)


@triton.jit
def _accumulate(acc, TAB, at, K0, K1, K2, K3, K4, K5, K6, e, mask, hs, N):
    """acc + Σ_n w_n (h k_n) over K0 … K_{N−1}, w_n = TAB[at + n], term by term (zero weights skipped); N a constexpr
    (the finish kernel's stages) or a runtime count (the stage kernel's: one compiled variant serves every stage)."""
    if N > 0:
        acc = _weighted_term(acc, TAB, at, K0, e, mask, hs)
    if N > 1:
        acc = _weighted_term(acc, TAB, at + 1, K1, e, mask, hs)
    if N > 2:
        acc = _weighted_term(acc, TAB, at + 2, K2, e, mask, hs)
    if N > 3:
        acc = _weighted_term(acc, TAB, at + 3, K3, e, mask, hs)
    if N > 4:
        acc = _weighted_term(acc, TAB, at + 4, K4, e, mask, hs)
    if N > 5:
        acc = _weighted_term(acc, TAB, at + 5, K5, e, mask, hs)
    if N > 6:
        acc = _weighted_term(acc, TAB, at + 6, K6, e, mask, hs)
    return acc


@triton.jit(do_not_specialize=["E", "D", "first", "J"])  # one compiled variant for every stage and problem size
def _stage(Y, OUT, T_COL, T_EXACT, T, H, LANDING, POINTS, TAB, K0, K1, K2, K3, K4, K5, K6, E, D, first, J,
           EXACT: tl.constexpr, BLOCK: tl.constexpr):
    """Y_i = y + Σ_j a_ij (h k_j) (TAB[first] = c_i, TAB[first + 1 + n] = the n-th nonzero a_ij, K<n> its k_j) and
    the stage time t + c_i h, written by each sample's first element."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = e < E
    rows = e // D
    t, h, h_step, landed, t_land = _clipped_step(T, H, LANDING, POINTS, rows, mask)
    y = tl.load(Y + e, mask=mask, other=0.0)
    hs = h_step.to(y.dtype)
    acc = _accumulate(y, TAB, first + 1, K0, K1, K2, K3, K4, K5, K6, e, mask, hs, J)
    tl.store(OUT + e, acc, mask=mask)
    c = tl.load(TAB + first)
    leading = mask & (e % D == 0)
    tl.store(T_COL + rows, t.to(y.dtype) + c.to(y.dtype) * hs, mask=leading)
    if EXACT:
        tl.store(T_EXACT + rows, t + c * h_step, mask=leading)


@triton.jit(do_not_specialize=["B", "D", "J_OUT", "berr_at", "dense_at", "W"])
def _finish(Y, YNEW, KNEW, K1OUT, COEF, TAB, CTRL, T, H, PREV, LANDING, POINTS, STEPS, CODE, ACTIVE, ACCEPTED,
            LAST_T, LAST_H, LAST_Y, LAST_COEF, OUT, OUT_TIMES, NEXT, K0, K1, K2, K3, K4, K5, K6,
            R_START, R_LENGTH, R_END, R_Y, R_COEF, R_COUNT, B, D, J_OUT, berr_at, dense_at, W,
            S: tl.constexpr, M: tl.constexpr, HAS_DT_MAX: tl.constexpr, RING: tl.constexpr, BB: tl.constexpr,
            BD: tl.constexpr):
    """The end of an attempt for BB samples, in place (see the module docstring; CTRL = rtol, atol, α, β, safety,
    factor_min, factor_max, dt_min, dt_max, max_steps, t_stop, t_end). ``RING``: a delay system's history, each
    accepted step pushed onto its sample's ring of W records (:class:`.fused_step.RingHistory`). The loops over
    the M coefficients are loops, not unrolled: a first solve compiles this kernel and :func:`_stage` in 1.6 s
    instead of 2.1 s (fp64, sm_90, Triton 3.6, on the 2-core development CPU; median of 9)."""
    rows = tl.program_id(0) * BB + tl.arange(0, BB)
    rmask = rows < B
    t, h, h_step, landed, t_land = _clipped_step(T, H, LANDING, POINTS, rows, rmask)
    E = B * D
    # pass 1: the error ratio and the continuous-extension coefficients (stored (M, B·D) for pass 2)
    r2 = tl.zeros([BB], dtype=tl.float64)
    for d0 in range(0, D, BD):
        cols = d0 + tl.arange(0, BD)
        mask = rmask[:, None] & (cols < D)[None, :]
        e = rows[:, None] * D + cols[None, :]
        y = tl.load(Y + e, mask=mask, other=0.0)
        hs = tl.broadcast_to(h_step.to(y.dtype)[:, None], [BB, BD])
        for p in range(M):
            coef = _accumulate(tl.zeros_like(hs), TAB, dense_at + p * S, K0, K1, K2, K3, K4, K5, K6, e, mask, hs, S)
            tl.store(COEF + p * E + e, coef, mask=mask)
        err = _accumulate(tl.zeros_like(hs), TAB, berr_at, K0, K1, K2, K3, K4, K5, K6, e, mask, hs, S)
        y_new = tl.load(YNEW + e, mask=mask, other=0.0)
        scale = tl.maximum(tl.abs(y), tl.abs(y_new)) * tl.load(CTRL).to(y.dtype) + tl.load(CTRL + 1).to(y.dtype)
        x = err / scale
        r2 += tl.sum(tl.where(mask, x * x, 0.0), axis=1).to(tl.float64)
    r2 = r2 / D
    tl.debug_barrier()  # the coefficients written above are read below by whichever threads hold those elements
    # the controller (per sample, float64 as the CPU kernel's double parts; the ratio in the state's dtype there)
    act = tl.load(ACTIVE + rows, mask=rmask, other=0) != 0
    accept = (r2 <= 1.0) & act
    log_r2 = tl.log(tl.where(r2 != r2, r2, tl.maximum(r2, 1e-20)))
    prev = tl.load(PREV + rows, mask=rmask, other=0.0).to(tl.float64)
    alpha, beta, safety = tl.load(CTRL + 2), tl.load(CTRL + 3), tl.load(CTRL + 4)
    factor_min, factor_max, dt_min = tl.load(CTRL + 5), tl.load(CTRL + 6), tl.load(CTRL + 7)
    factor = tl.exp(prev - alpha / 2 * log_r2)
    factor = tl.where(factor != factor, factor_min, factor)
    factor = tl.minimum(tl.maximum(factor, factor_min), factor_max)
    factor = tl.minimum(factor, tl.where(accept, factor_max, 1.0))
    h_next = tl.where(h_step > 0, h_step, h) * factor
    if HAS_DT_MAX:
        h_next = tl.minimum(h_next, tl.load(CTRL + 8), propagate_nan=tl.PropagateNan.ALL)
    t_after = tl.where(accept, t_land, t)
    stuck = (act != accept) & ((t + h_next) - t <= dt_min)
    steps = tl.load(STEPS + rows, mask=rmask, other=0) + act.to(tl.int64)
    code = tl.load(CODE + rows, mask=rmask, other=0)
    code = tl.where(stuck, tl.where(r2 < _INF, _UNDERFLOW_CODE, _NONFINITE_CODE), code)
    t_end = tl.load(CTRL + 11)
    # every attempt (the torch loop tests from attempt max_steps − max steps on: no sample reaches it before)
    over = act & (steps.to(tl.float64) >= tl.load(CTRL + 9)) & (t_after < t_end)
    code = tl.where(over, _MAX_STEPS_CODE, code)
    prev = tl.where(accept, tl.maximum(log_r2, _LOG_FLOOR) * (beta / 2) + tl.log(safety), prev)
    going = (code == _SUCCESS_CODE) & (t_after < tl.load(CTRL + 10))
    tl.store(PREV + rows, prev.to(PREV.dtype.element_ty), mask=rmask)
    tl.store(H + rows, tl.where(act, h_next, h), mask=rmask)
    tl.store(T + rows, t_after, mask=rmask)
    tl.store(STEPS + rows, steps, mask=rmask)
    tl.store(CODE + rows, code, mask=rmask)
    tl.store(ACTIVE + rows, going.to(tl.int8), mask=rmask)
    landing = tl.load(LANDING + rows, mask=rmask, other=0)
    tl.store(LANDING + rows, landing + (accept & landed).to(tl.int64), mask=rmask)
    accepted = tl.load(ACCEPTED + rows, mask=rmask, other=0)
    tl.store(ACCEPTED + rows, accepted + accept.to(tl.int64), mask=rmask)
    # pass 2: the outputs inside each accepted step, then the step becomes the sample's last accepted one
    nxt = tl.load(NEXT + rows, mask=rmask, other=0)
    pending = accept & (nxt < J_OUT)
    pending = pending & (tl.load(OUT_TIMES + nxt, mask=pending, other=_INF) <= t_after)
    while tl.max(pending.to(tl.int32), axis=0) > 0:
        theta = (tl.load(OUT_TIMES + nxt, mask=pending, other=0.0) - t) / tl.where(pending, h_step, 1.0)
        for d0 in range(0, D, BD):
            cols = d0 + tl.arange(0, BD)
            mask = pending[:, None] & (cols < D)[None, :]
            e = rows[:, None] * D + cols[None, :]
            y = tl.load(Y + e, mask=mask, other=0.0)
            th = tl.broadcast_to(theta.to(y.dtype)[:, None], [BB, BD])
            acc = tl.load(COEF + (M - 1) * E + e, mask=mask, other=0.0)
            for q in range(M - 1):
                acc = tl.fma(th, acc, tl.load(COEF + (M - 2 - q) * E + e, mask=mask, other=0.0))
            tl.store(OUT + (nxt[:, None] * B + rows[:, None]) * D + cols[None, :], tl.fma(th, acc, y), mask=mask)
        nxt = nxt + pending.to(nxt.dtype)
        pending = pending & (nxt < J_OUT)
        pending = pending & (tl.load(OUT_TIMES + nxt, mask=pending, other=_INF) <= t_after)
    tl.store(NEXT + rows, nxt, mask=rmask)
    tl.debug_barrier()  # every output has read y before y is overwritten below
    moved = accept & (t_after > t)
    tl.store(LAST_T + rows, t, mask=rmask & moved)
    tl.store(LAST_H + rows, h_step, mask=rmask & moved)
    if RING:
        count = tl.load(R_COUNT + rows, mask=rmask, other=0)
        slot = rows.to(tl.int64) * W + count % W  # the record this step becomes
        tl.store(R_START + slot, t, mask=rmask & moved)
        tl.store(R_LENGTH + slot, h_step, mask=rmask & moved)
        tl.store(R_END + slot, t_after, mask=rmask & moved)
        tl.store(R_COUNT + rows, count + moved.to(tl.int64), mask=rmask)
    for d0 in range(0, D, BD):
        cols = d0 + tl.arange(0, BD)
        inside = rmask[:, None] & (cols < D)[None, :]
        e = rows[:, None] * D + cols[None, :]
        keep = inside & moved[:, None]
        y = tl.load(Y + e, mask=keep, other=0.0)
        tl.store(LAST_Y + e, y, mask=keep)
        if RING:
            record = slot[:, None] * D + cols[None, :]
            tl.store(R_Y + record, y, mask=keep)
        for p in range(M):
            coef = tl.load(COEF + p * E + e, mask=keep, other=0.0)
            tl.store(LAST_COEF + e * M + p, coef, mask=keep)
            if RING:
                tl.store(R_COEF + record * M + p, coef, mask=keep)
        take = inside & accept[:, None]
        tl.store(Y + e, tl.load(YNEW + e, mask=take, other=0.0), mask=take)
        tl.store(K1OUT + e, tl.load(KNEW + e, mask=take, other=0.0), mask=take)


@triton.jit(do_not_specialize=["B", "D", "W", "steps", "right"])  # left and right reads: one variant
def _history(S_TIMES, OUT, BEFORE, R_START, R_LENGTH, R_END, R_Y, R_COEF, R_COUNT, CONSTANTS, B, D, W, steps, right,
             M: tl.constexpr, BB: tl.constexpr, BD: tl.constexpr):
    """y(s_b) per sample from its ring (``fused_step``'s ``rk_history``): the record of the first step ending at or
    after s − eps (``right``: the first ending after max(s, t0) + eps), found by ``steps`` ≥ log2(W) + 1 halvings,
    y + θ (C_1 + θ (C_2 + …)) with fused multiply-adds; BEFORE[b] = 1 where φ is read instead (s ≤ t0 + eps;
    ``right``: s < t0 − eps; or no record yet), OUT[b] then left as it was. CONSTANTS = (t0, eps), float64."""
    rows = tl.program_id(0) * BB + tl.arange(0, BB)
    rmask = rows < B
    s = tl.load(S_TIMES + rows, mask=rmask, other=0.0)
    t0, eps = tl.load(CONSTANTS), tl.load(CONSTANTS + 1)
    n = tl.load(R_COUNT + rows, mask=rmask, other=0)
    phi = tl.where(right != 0, s < t0 - eps, s <= t0 + eps) | (n == 0)
    key = tl.where(right != 0, tl.maximum(s, t0) + eps, s - eps)
    lo = tl.maximum(n - W, 0)
    hi = tl.maximum(n - 1, 0)
    base = rows.to(tl.int64) * W
    for _ in range(steps):
        mid = lo + (hi - lo) // 2
        end = tl.load(R_END + base + mid % W, mask=rmask, other=0.0)
        found = tl.where(right != 0, end > key, end >= key)
        searching = lo < hi
        hi = tl.where(searching & found, mid, hi)
        lo = tl.where(searching & (found == 0), mid + 1, lo)
    slot = base + lo % W
    read = rmask & (phi == 0)
    start = tl.load(R_START + slot, mask=read, other=0.0)
    length = tl.load(R_LENGTH + slot, mask=read, other=1.0)
    for d0 in range(0, D, BD):
        cols = d0 + tl.arange(0, BD)
        mask = read[:, None] & (cols < D)[None, :]
        record = slot[:, None] * D + cols[None, :]
        y = tl.load(R_Y + record, mask=mask, other=0.0)
        theta = tl.broadcast_to(((s - start) / length).to(y.dtype)[:, None], [BB, BD])
        acc = tl.load(R_COEF + record * M + (M - 1), mask=mask, other=0.0)
        for q in tl.static_range(M - 1):
            acc = tl.fma(theta, acc, tl.load(R_COEF + record * M + (M - 2 - q), mask=mask, other=0.0))
        tl.store(OUT + rows[:, None] * D + cols[None, :], tl.fma(theta, acc, y), mask=mask)
    tl.store(BEFORE + rows, phi.to(tl.int8), mask=rmask)


def _launch(kernel, grid: tuple, *args, **meta) -> None:
    """``kernel[grid](*args, **meta)``; a failure (compilation, launch) is remembered, warned about once and raised
    as :class:`KernelFailure` -- except while a CUDA graph is being captured, where it is the capture's failure
    (:class:`ChunkGraph` handles it)."""
    global _FAILURE
    try:
        kernel[grid](*args, **meta)
    except Exception as err:  # noqa: BLE001 -- whatever failed, the torch loop can take the solve
        if _capturing():
            raise
        _FAILURE = f"{type(err).__name__}: {err}"
        warnings.warn(f"odelab: the Triton kernels of the adaptive loop failed ({_FAILURE[:300]}); the torch loop "
                      "takes this and every later solve", RuntimeWarning, stacklevel=3)
        raise KernelFailure(_FAILURE) from err


_GRAPH_FAILURE: str | None = None  # why a capture failed in this process (then chunks run eagerly)


class ChunkGraph:
    """The attempts of a chunk replayed as one CUDA graph (``cuda_graph=True``): one launch of recorded work per
    chunk instead of the field's ops and the kernels launched from Python one by one.

    The first chunk of a segment runs eagerly (kernels compiled, memory allocated), the second is captured and
    every later one replays it. A chunk reads nothing on the host and keeps what the next chunk reads in tensors
    that stay in place -- what a replay needs; :meth:`reset` drops the graph after such a tensor was reallocated
    (a delay system's ring grew). The field's Python code runs once, at the capture: a field with Python side
    effects, or whose ops depend on Python state that changes between evaluations, must not be captured. A failed
    capture (a field that reads a value on the host, copies from the CPU, ...) warns once and the chunks of this
    process run eagerly from then on."""

    def __init__(self, run: Callable[[], None]):
        self.run, self.graph, self.warm = run, None, False

    def __call__(self) -> None:
        global _GRAPH_FAILURE
        if _GRAPH_FAILURE is not None:
            self.run()
            return
        if not self.warm:
            self.warm = True
            _warm_up(self.run)
            return
        if self.graph is None:
            try:
                self.graph = _capture(self.run)
            except Exception as err:  # noqa: BLE001 -- nothing ran; the eager chunk takes over
                _GRAPH_FAILURE = f"{type(err).__name__}: {err}"
                warnings.warn(f"odelab: capturing the adaptive loop's chunk in a CUDA graph failed "
                              f"({_GRAPH_FAILURE[:300]}); chunks run eagerly", RuntimeWarning, stacklevel=3)
                self.run()
                return
        self.graph.replay()

    def reset(self) -> None:
        self.graph = None


class TritonHistory(RingHistory):
    """:class:`.fused_step.RingHistory` on CUDA: rings pushed by :func:`_finish`, read by :func:`_history`; φ(s) is
    evaluated for the whole batch at every read and taken where the kernel says so (no host read)."""

    def __init__(self, solver):
        super().__init__(solver)
        self.constants = torch.tensor([self.t0, self.eps], dtype=torch.float64, device=solver.device)
        self.block_d = min(64, triton.next_power_of_2(max(self.dim, 1)))

    def at(self, s: Tensor, right: bool = False) -> Tensor:
        """y(s) per sample (s: (batch,) float64), as :meth:`.step_history.StepHistory.at`."""
        s = s.detach().to(torch.float64).contiguous()
        out = torch.empty(self.batch, self.dim, dtype=self.dtype, device=s.device)
        before = torch.empty(self.batch, dtype=torch.int8, device=s.device)
        _launch(_history, (triton.cdiv(self.batch, _ROWS),), s, out, before, *self.buffers(), self.constants,
                self.batch, self.dim, self.window, self.window.bit_length() + 1, int(right), M=self.m, BB=_ROWS,
                BD=self.block_d)
        return torch.where(before.bool().unsqueeze(1), self.before(s), out)


class TritonLoop:
    """The adaptive loop of :class:`.adaptive._Integrator` with the arithmetic around the field in the kernels above,
    on state buffers updated in place; the host reads whether any sample is active once per ``solver.chunk``
    attempts."""

    def __init__(self, solver):
        tab, opts = solver.tab, solver.opts
        self.solver = solver
        numbers, self.stage_at = [], []
        for i, row in enumerate(solver.rows):
            self.stage_at.append(len(numbers))
            numbers += [tab.c[i], *(a for _, a in row)]
        self.berr_at = len(numbers)
        numbers += [float(x) for x in tab.b_err]
        self.dense_at = len(numbers)
        self.m = len(tab.dense[0])
        numbers += [float(w) for column in zip(*tab.dense) for w in column]  # P^T, (m, stages)
        self.tab = torch.tensor(numbers, dtype=torch.float64, device=solver.device)
        self.control = [opts.rtol, opts.atol, opts.alpha, opts.beta, opts.safety, opts.factor_min, opts.factor_max,
                        opts.dt_min, solver.dt_max if solver.dt_max < math.inf else 0.0, float(opts.max_steps)]

    def segment(self, carry, t_stop: float, out_times: list[float]) -> tuple:
        """As :meth:`.fused_step.FusedLoop.segment` (the carry is not modified: after a :class:`KernelFailure` the torch
        loop can take the segment from it)."""
        s = self.solver
        batch, dim, m, stages, dtype, device = s.batch, s.dim, self.m, s.tab.stages, s.dtype, s.device
        state = lambda x: x.detach().clone(memory_format=torch.contiguous_format)
        y, k1, t, h, prev, landing, steps, accepted, code = (state(getattr(carry, name)) for name in (
            "y", "k1", "t", "h", "prev", "landing", "steps", "accepted", "code"))
        last_t, last_h, last_y, last_coef = (state(getattr(carry, name)) for name in (
            "last_t", "last_h", "last_y", "last_coef"))
        control = torch.tensor(self.control + [t_stop, s.t_end], dtype=torch.float64, device=device)
        active = ((code == _SUCCESS) & (t < t_stop)).to(torch.int8)
        times = torch.tensor(out_times, dtype=torch.float64, device=device)
        out = y.new_empty(len(out_times), batch, dim)  # (J, B, D), as the CPU kernels write it
        written = self._emit_before(out, times, t, last_t, last_h, last_y, last_coef)
        ys = [y] + [torch.empty_like(y) for _ in range(1, stages)]
        t_cols = [None] + [y.new_empty(batch, 1) for _ in range(1, stages)]
        t_exact = [None] + [torch.empty_like(t) if s.exact_time else None for _ in range(1, stages)]
        coef = y.new_empty(m, batch * dim)
        elements, block_d = batch * dim, min(64, triton.next_power_of_2(max(dim, 1)))
        stage_grid, finish_grid = (triton.cdiv(elements, _ELEMENTS),), (triton.cdiv(batch, _ROWS),)
        restarts = carry.restarts.clone()
        ks = [k1] * _MAX_STAGES
        # a delay system's dense history reads the rings of accepted steps that the finish kernel fills
        ring = None if s.history is None else TritonHistory(s)
        torch_history = s.history
        if ring is not None:
            s.history = ring
        # a dense output: after each attempt, every sample's last accepted step (see .fused_step.FusedLoop.segment)
        copies = StepCopies(last_t, last_h, last_y, last_coef) if s.dense_pieces else None

        def attempts() -> None:
            """``s.chunk`` attempts of every sample, in place; no host read (what a CUDA graph replays)."""
            for _ in range(s.chunk):
                end_col = None
                if s.restarts:  # no host read: samples on a jump of f re-evaluate k1, f is evaluated batch-wide
                    restart = s.on_jump(active != 0, landing, t)
                    restarts.add_(restart)
                    k1.copy_(s.restart(y, k1, t, landing, restart)[1])
                    # stages ending a step on a jump of f see the time one ulp before it
                    h_step, landed, _ = s.clipped_step(t, h, landing, s.landing)
                    end_col = s.end_time(t.to(dtype).unsqueeze(1), h_step.to(dtype).unsqueeze(1), landed, landing)
                inp = s.held_input(landing)
                for i in range(1, stages):
                    sources = [ks[j] for j, _ in s.rows[i]]
                    _launch(_stage, stage_grid, y, ys[i], t_cols[i], t_exact[i] if t_exact[i] is not None else t,
                            t, h, landing, s.landing, self.tab, *(sources + [y] * (_MAX_STAGES - len(sources))),
                            elements, dim, self.stage_at[i], len(sources), EXACT=t_exact[i] is not None,
                            BLOCK=_ELEMENTS)
                    t_col = end_col if end_col is not None and s.tab.c[i] == 1.0 else t_cols[i]
                    k_i = s.field(t_exact[i], t_col, ys[i], inp)
                    if k_i.dtype != dtype or not k_i.is_contiguous():
                        k_i = k_i.to(dtype).contiguous()
                    ks[i] = k_i
                rings = ring.buffers() if ring is not None else [t, t, t, y, y, steps]  # (unused without delays)
                _launch(_finish, finish_grid, y, ys[-1], ks[stages - 1], k1, coef, self.tab, control, t, h, prev,
                        landing, s.landing, steps, code, active, accepted, last_t, last_h, last_y, last_coef, out,
                        times, written, *ks, *rings, batch, dim, len(out_times), self.berr_at, self.dense_at,
                        ring.window if ring is not None else 1, S=stages, M=m, HAS_DT_MAX=s.dt_max < math.inf,
                        RING=ring is not None, BB=_ROWS, BD=block_d)
                if copies is not None:
                    copies.append(last_t, last_h, last_y, last_coef, t)

        if copies is not None:
            copies.append(last_t, last_h, last_y, last_coef, t)
        chunk = ChunkGraph(attempts) if s.opts.cuda_graph else attempts
        try:
            while True:  # one host read per chunk: any sample active, and (delays) whether a ring must grow first
                if ring is None:
                    going = bool(active.any())
                else:
                    going, short = torch.stack([active.any(), ring.short(t, active != 0, s.chunk)]).tolist()
                    while short:
                        ring.grow()
                        short = bool(ring.short(t, active != 0, s.chunk))
                        if isinstance(chunk, ChunkGraph):
                            chunk.reset()  # the graph read the rings' old buffers
                if not going:
                    break
                chunk()
        finally:
            s.history = torch_history
        if copies is not None:
            s.pieces_kept = copies.pieces(s.sizes)
        out = out.transpose(0, 1)
        if len(out_times) and bool((written < len(out_times)).any()):  # times a sample never reached (it failed)
            unreached = torch.arange(len(out_times), device=device).unsqueeze(0) >= written.unsqueeze(1)
            out = torch.where(unreached.unsqueeze(-1), math.nan, out)
        return out, (y, k1, t, h, prev, landing, steps, accepted, code, restarts, last_t, last_h, last_y,
                     last_coef)

    def _emit_before(self, out: Tensor, times: Tensor, t: Tensor, last_t: Tensor, last_h: Tensor, last_y: Tensor,
                     last_coef: Tensor) -> Tensor:
        """The outputs at or before each sample's t, from its last accepted step (a segment's start; torch ops, once
        per segment); returns how many outputs each sample has."""
        batch, dim = last_y.shape
        owed = times.unsqueeze(0) <= t.unsqueeze(1)  # (B, J)
        written = owed.sum(1)
        count = int(written.max()) if batch else 0  # the owed outputs are the first ones: only they are evaluated
        if count:
            theta = ((times[:count].unsqueeze(0) - last_t.unsqueeze(1)) / last_h.unsqueeze(1)).to(last_y.dtype)
            coef = last_coef.view(batch, 1, dim, -1).unbind(-1)
            value = horner(last_y.unsqueeze(1), coef, theta.unsqueeze(-1))  # (B, count, D)
            head = out[:count].transpose(0, 1)
            out[:count] = torch.where(owed[:, :count].unsqueeze(-1), value, head).transpose(0, 1)
        return written
