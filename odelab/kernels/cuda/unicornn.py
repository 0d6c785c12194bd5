"""One UnICORNN layer with symplectic Euler (002 eq. 3.6), the per-neuron step Δt σ̂(c):

    z_n = z_{n−1} − Δt σ̂(c) ⊙ (tanh(w ⊙ y_{n−1} + x_n) + α y_{n−1}),   x_n = V u_n + b (``encode``)
    y_n = y_{n−1} + Δt σ̂(c) ⊙ z_n

The recurrence is diagonal, so the kernels are elementwise over batch × hidden: a 1-D grid of BLOCK elements,
each running its whole sequence in registers (forward: writes z_n, y_n; backward: the adjoint recursion from
the stored states, writing ∂L/∂x_n per step and per-element partial sums of ∂L/∂w and ∂L/∂c, reduced over
the batch in torch). A lane's step is a few dozen arithmetic instructions, far less than one memory round trip,
so the loops take eight steps per trip and load the next eight steps' inputs (and, backward, stored states and
output gradients) before computing the current eight: the recurrence waits on its arithmetic, not on memory
(at (32, 1000, 16) on an H200 the one-step-at-a-time kernels took 1.8 ms forward + backward, 0.92× cuDNN's
LSTM; four steps a trip 1.4 ms, 0.71×, on the H200 of 2026-11-26; eight a trip, with the shorter float32 tanh
that leaves less arithmetic to cover a round trip: not measured on a GPU yet).

The reversible variant (:class:`ReversibleUnICORNNSequence`, eq. 3.7) stores no per-step state: its forward
writes y_1..y_T and the final (z_T, y_T); its backward recomputes x_n = V u_n + b (one GEMM) and walks n = T..1,
rebuilding (y_{n−1}, z_{n−1}) from (y_n, z_n) with the exact inverse step while it runs the same adjoint
recursion; ∂L/∂x_n overwrites x_n, and the gradients of V, b and u are GEMMs in torch.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..derivatives import kernel_backward
from ..chunks import held_encoding, in_chunks
from ._common import available, on_device, sigmoid, tanh  # noqa: F401

BLOCK = 128


@triton.jit
def _lanes(Wv, Cv, K, B, H, BLOCK: tl.constexpr):
    """This program's BLOCK (sample, neuron) lanes: flat index (64-bit), mask, sample b, neuron j, and the
    constants Δt, α, w_j, σ̂(c_j)."""
    idx = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)  # 64-bit offsets
    mask = idx < B * H
    j = idx % H
    w = tl.load(Wv + j, mask=mask, other=0.0)
    s = sigmoid(tl.load(Cv + j, mask=mask, other=0.0))
    return idx, mask, idx // H, j, tl.load(K), tl.load(K + 1), w, s


@triton.jit
def _ahead(ptr, zero, mask, valid_from, n, stride, T):
    """The value at step n (ptr + n·stride) of each lane, 0 outside valid_from ≤ n < T: a load issued a chunk
    ahead of its use (the recurrence waits on no memory round trip, only on its arithmetic)."""
    return tl.load(ptr + n * stride, mask=mask & (zero + n >= valid_from) & (zero + n < T), other=0.0)


@triton.jit
def _four_ahead(ptr, zero, mask, valid_from, n, step, stride, T):
    """:func:`_ahead` at steps n, n + step, n + 2 step, n + 3 step."""
    return (_ahead(ptr, zero, mask, valid_from, n, stride, T), _ahead(ptr, zero, mask, valid_from, n + step, stride, T),
            _ahead(ptr, zero, mask, valid_from, n + 2 * step, stride, T),
            _ahead(ptr, zero, mask, valid_from, n + 3 * step, stride, T))


@triton.jit
def _forward_step(z, y, x, w, s, dt, alpha, Z, Y, at, valid):
    """(3.6) from (z, y) with input x, stored at ``at`` (offset of step n); only where ``valid``."""
    zn = z + dt * (-s * (tanh(w * y + x) + alpha * y))
    yn = y + dt * (s * zn)
    tl.store(Z + at, zn, mask=valid)
    tl.store(Y + at, yn, mask=valid)
    return tl.where(valid, zn, z), tl.where(valid, yn, y)


@triton.jit
def _forward_four(z, y, x0, x1, x2, x3, w, s, dt, alpha, Z, Y, at, n, zero, mask, T, H):
    """Steps n + 1 … n + 4 (:func:`_forward_step`), x0 … x3 their inputs."""
    z, y = _forward_step(z, y, x0, w, s, dt, alpha, Z, Y, at + (n + 1) * H, mask & (zero + n < T))
    z, y = _forward_step(z, y, x1, w, s, dt, alpha, Z, Y, at + (n + 2) * H, mask & (zero + n + 1 < T))
    z, y = _forward_step(z, y, x2, w, s, dt, alpha, Z, Y, at + (n + 3) * H, mask & (zero + n + 2 < T))
    return _forward_step(z, y, x3, w, s, dt, alpha, Z, Y, at + (n + 4) * H, mask & (zero + n + 3 < T))


@triton.jit
def _forward(E, Wv, Cv, K, Z0, Y0, Z, Y, ZT, YT, B, T, H, BLOCK: tl.constexpr):
    """Eight steps per trip, the next eight inputs loaded before them; (Z0, Y0) (B, H) copied to step 0 of Z, Y
    (B, T + 1, H), the last step also to (ZT, YT)."""
    idx, mask, b, j, dt, alpha, w, s = _lanes(Wv, Cv, K, B, H, BLOCK)
    zero = idx * 0
    z = tl.load(Z0 + idx, mask=mask, other=0.0)
    y = tl.load(Y0 + idx, mask=mask, other=0.0)
    tl.store(Z + b * (T + 1) * H + j, z, mask=mask)
    tl.store(Y + b * (T + 1) * H + j, y, mask=mask)
    xs = E + b * T * H + j
    x0, x1, x2, x3 = _four_ahead(xs, zero, mask, 0, 0, 1, H, T)
    x4, x5, x6, x7 = _four_ahead(xs, zero, mask, 0, 4, 1, H, T)
    at = b * (T + 1) * H + j
    for n in range(0, T, 8):  # steps n + 1 … n + 8
        p0, p1, p2, p3 = _four_ahead(xs, zero, mask, 0, n + 8, 1, H, T)
        p4, p5, p6, p7 = _four_ahead(xs, zero, mask, 0, n + 12, 1, H, T)
        z, y = _forward_four(z, y, x0, x1, x2, x3, w, s, dt, alpha, Z, Y, at, n, zero, mask, T, H)
        z, y = _forward_four(z, y, x4, x5, x6, x7, w, s, dt, alpha, Z, Y, at, n + 4, zero, mask, T, H)
        x0, x1, x2, x3, x4, x5, x6, x7 = p0, p1, p2, p3, p4, p5, p6, p7
    tl.store(ZT + idx, z, mask=mask)
    tl.store(YT + idx, y, mask=mask)


@triton.jit
def _adjoint_step(ly, lz, gw, gs, z, yp, force, th, w, s, dt, alpha):
    """The adjoint of one step (3.6) from (y_{n−1}, z_{n−1}) = (yp, ·) to (y_n, z_n) = (·, z), with
    force = tanh(a) + α y_{n−1}, th = tanh(a): (∂L/∂y_{n−1}, ∂L/∂z_{n−1}, ∂L/∂a, the w and σ̂(c) sums)."""
    gs += ly * dt * z  # y_n = y_{n−1} + Δt s z_n
    lz = lz + dt * s * ly
    gs += -lz * dt * force  # z_n = z_{n−1} − Δt s (tanh(a) + α y_{n−1})
    ga = -lz * dt * s * (1.0 - th * th)
    gw += ga * yp
    return ly + ga * w - lz * dt * s * alpha, lz, ga, gw, gs


@triton.jit
def _backward_step(ly, lz, gw, gs, zn, yp, x, go, w, s, dt, alpha, G, at, valid):
    """The adjoint of step n (zn = z_n, yp = y_{n−1}, x = x_n; go = ∂L/∂y_{n−1} from the outputs), ∂L/∂x_n stored
    at ``at``; only where ``valid``."""
    th = tanh(w * yp + x)
    ly2, lz2, ga, gw2, gs2 = _adjoint_step(ly, lz, gw, gs, zn, yp, th + alpha * yp, th, w, s, dt, alpha)
    tl.store(G + at, ga, mask=valid)
    return (tl.where(valid, ly2 + go, ly), tl.where(valid, lz2, lz), tl.where(valid, gw2, gw),
            tl.where(valid, gs2, gs))


@triton.jit
def _backward_four(ly, lz, gw, gs, z0, y0, x0, o0, z1, y1, x1, o1, z2, y2, x2, o2, z3, y3, x3, o3, w, s, dt, alpha,
                   G, at, n, zero, mask, H):
    """Steps n, n − 1, n − 2, n − 3 (:func:`_backward_step`) from their stored states, inputs and output gradients."""
    ly, lz, gw, gs = _backward_step(ly, lz, gw, gs, z0, y0, x0, o0, w, s, dt, alpha, G, at + n * H,
                                    mask & (zero + n >= 1))
    ly, lz, gw, gs = _backward_step(ly, lz, gw, gs, z1, y1, x1, o1, w, s, dt, alpha, G, at + (n - 1) * H,
                                    mask & (zero + n >= 2))
    ly, lz, gw, gs = _backward_step(ly, lz, gw, gs, z2, y2, x2, o2, w, s, dt, alpha, G, at + (n - 2) * H,
                                    mask & (zero + n >= 3))
    return _backward_step(ly, lz, gw, gs, z3, y3, x3, o3, w, s, dt, alpha, G, at + (n - 3) * H,
                          mask & (zero + n >= 4))


@triton.jit
def _backward(E, Wv, Cv, K, Z, Y, GO, DZ, DY, GZ, GY, G, GWS, B, T, H, BLOCK: tl.constexpr,
              HAS_DZ: tl.constexpr = True, HAS_DY: tl.constexpr = True):
    """Steps n = T … 1, eight per trip, the next eight steps' stored states, inputs and output gradients loaded
    before them. DZ, DY: ∂L/∂(z_T, y_T), read where HAS_DZ / HAS_DY (zero otherwise); GZ, GY: ∂L/∂(z_0, y_0) out;
    GWS (2, B, H): each row's sums of ∂L/∂w, ∂L/∂c out."""
    idx, mask, b, j, dt, alpha, w, s = _lanes(Wv, Cv, K, B, H, BLOCK)
    zero = idx * 0
    lz, ly = _final_adjoints(DZ, DY, GO, idx, mask, b, j, T, H, HAS_DZ, HAS_DY)
    gw = tl.zeros((BLOCK,), dtype=w.dtype)
    gs = tl.zeros((BLOCK,), dtype=w.dtype)
    zs = Z + b * (T + 1) * H + j  # z_n at zs + n·H; y_{n−1} at ys + n·H; x_n at xs + n·H; ∂L/∂y_{n−1} at gs_ + n·H
    ys = Y + b * (T + 1) * H + j - H
    xs = E + b * T * H + j - H
    go = GO + b * T * H + j - 2 * H
    top = T + 1
    z0, z1, z2, z3 = _four_ahead(zs, zero, mask, 1, T, -1, H, top)
    y0, y1, y2, y3 = _four_ahead(ys, zero, mask, 1, T, -1, H, top)
    x0, x1, x2, x3 = _four_ahead(xs, zero, mask, 1, T, -1, H, top)
    o0, o1, o2, o3 = _four_ahead(go, zero, mask, 2, T, -1, H, top)
    z4, z5, z6, z7 = _four_ahead(zs, zero, mask, 1, T - 4, -1, H, top)
    y4, y5, y6, y7 = _four_ahead(ys, zero, mask, 1, T - 4, -1, H, top)
    x4, x5, x6, x7 = _four_ahead(xs, zero, mask, 1, T - 4, -1, H, top)
    o4, o5, o6, o7 = _four_ahead(go, zero, mask, 2, T - 4, -1, H, top)
    at = b * T * H + j - H
    for i in range(0, T, 8):
        n = T - i  # steps n, n − 1, …, n − 7
        q0, q1, q2, q3 = _four_ahead(zs, zero, mask, 1, n - 8, -1, H, top)
        r0, r1, r2, r3 = _four_ahead(ys, zero, mask, 1, n - 8, -1, H, top)
        u0, u1, u2, u3 = _four_ahead(xs, zero, mask, 1, n - 8, -1, H, top)
        v0, v1, v2, v3 = _four_ahead(go, zero, mask, 2, n - 8, -1, H, top)
        q4, q5, q6, q7 = _four_ahead(zs, zero, mask, 1, n - 12, -1, H, top)
        r4, r5, r6, r7 = _four_ahead(ys, zero, mask, 1, n - 12, -1, H, top)
        u4, u5, u6, u7 = _four_ahead(xs, zero, mask, 1, n - 12, -1, H, top)
        v4, v5, v6, v7 = _four_ahead(go, zero, mask, 2, n - 12, -1, H, top)
        ly, lz, gw, gs = _backward_four(ly, lz, gw, gs, z0, y0, x0, o0, z1, y1, x1, o1, z2, y2, x2, o2, z3, y3, x3,
                                        o3, w, s, dt, alpha, G, at, n, zero, mask, H)
        ly, lz, gw, gs = _backward_four(ly, lz, gw, gs, z4, y4, x4, o4, z5, y5, x5, o5, z6, y6, x6, o6, z7, y7, x7,
                                        o7, w, s, dt, alpha, G, at, n - 4, zero, mask, H)
        z0, z1, z2, z3, z4, z5, z6, z7 = q0, q1, q2, q3, q4, q5, q6, q7
        y0, y1, y2, y3, y4, y5, y6, y7 = r0, r1, r2, r3, r4, r5, r6, r7
        x0, x1, x2, x3, x4, x5, x6, x7 = u0, u1, u2, u3, u4, u5, u6, u7
        o0, o1, o2, o3, o4, o5, o6, o7 = v0, v1, v2, v3, v4, v5, v6, v7
    _store_adjoints(GZ, GY, GWS, lz, ly, gw, gs, s, idx, mask, B, H)


@triton.jit
def _final_adjoints(DZ, DY, GO, idx, mask, b, j, T, H, HAS_DZ: tl.constexpr, HAS_DY: tl.constexpr):
    """(λz, λy) of the final state: ∂L/∂z_T (zero without DZ), ∂L/∂y_T plus the last output's gradient."""
    ly = tl.load(GO + b * T * H + (T - 1) * H + j, mask=mask, other=0.0)
    if HAS_DY:
        ly += tl.load(DY + idx, mask=mask, other=0.0)
    if HAS_DZ:
        lz = tl.load(DZ + idx, mask=mask, other=0.0)
    else:
        lz = tl.zeros_like(ly)
    return lz, ly


@triton.jit
def _store_adjoints(GZ, GY, GWS, lz, ly, gw, gs, s, idx, mask, B, H):
    """∂L/∂(z_0, y_0) into GZ, GY, each row's ∂L/∂w and ∂L/∂c (= ∂L/∂σ̂(c) σ̂(c) (1 − σ̂(c))) into GWS's two
    halves."""
    tl.store(GZ + idx, lz, mask=mask)
    tl.store(GY + idx, ly, mask=mask)
    tl.store(GWS + idx, gw, mask=mask)
    tl.store(GWS + B * H + idx, gs * s * (1.0 - s), mask=mask)


@triton.jit
def _reversible_forward_step(z, y, x, w, s, dt, alpha, YS, at, valid):
    """(3.6) from (z, y) with input x, y_n stored at ``at``; only where ``valid``."""
    zn = z + dt * (-s * (tanh(w * y + x) + alpha * y))  # (3.6, z)
    yn = y + dt * (s * zn)  # (3.6, y)
    tl.store(YS + at, yn, mask=valid)
    return tl.where(valid, zn, z), tl.where(valid, yn, y)


@triton.jit
def _reversible_forward_four(z, y, x0, x1, x2, x3, w, s, dt, alpha, YS, at, n, zero, mask, T, H):
    """Steps n + 1 … n + 4 (:func:`_reversible_forward_step`), x0 … x3 their inputs."""
    z, y = _reversible_forward_step(z, y, x0, w, s, dt, alpha, YS, at + n * H, mask & (zero + n < T))
    z, y = _reversible_forward_step(z, y, x1, w, s, dt, alpha, YS, at + (n + 1) * H, mask & (zero + n + 1 < T))
    z, y = _reversible_forward_step(z, y, x2, w, s, dt, alpha, YS, at + (n + 2) * H, mask & (zero + n + 2 < T))
    return _reversible_forward_step(z, y, x3, w, s, dt, alpha, YS, at + (n + 3) * H, mask & (zero + n + 3 < T))


@triton.jit
def _reversible_forward(E, Wv, Cv, K, Z, Y, YS, B, T, H, BLOCK: tl.constexpr):
    """Z, Y (B, H): the initial state on entry, the final state on exit; YS (B, T, H): y_1..y_T. Eight steps per
    trip, the next eight inputs loaded before them."""
    idx, mask, b, j, dt, alpha, w, s = _lanes(Wv, Cv, K, B, H, BLOCK)
    zero = idx * 0
    z = tl.load(Z + idx, mask=mask, other=0.0)
    y = tl.load(Y + idx, mask=mask, other=0.0)
    at = b * T * H + j
    xs = E + at
    x0, x1, x2, x3 = _four_ahead(xs, zero, mask, 0, 0, 1, H, T)
    x4, x5, x6, x7 = _four_ahead(xs, zero, mask, 0, 4, 1, H, T)
    for n in range(0, T, 8):  # steps n + 1 … n + 8 (y_{n+1} at YS index n)
        p0, p1, p2, p3 = _four_ahead(xs, zero, mask, 0, n + 8, 1, H, T)
        p4, p5, p6, p7 = _four_ahead(xs, zero, mask, 0, n + 12, 1, H, T)
        z, y = _reversible_forward_four(z, y, x0, x1, x2, x3, w, s, dt, alpha, YS, at, n, zero, mask, T, H)
        z, y = _reversible_forward_four(z, y, x4, x5, x6, x7, w, s, dt, alpha, YS, at, n + 4, zero, mask, T, H)
        x0, x1, x2, x3, x4, x5, x6, x7 = p0, p1, p2, p3, p4, p5, p6, p7
    tl.store(Z + idx, z, mask=mask)
    tl.store(Y + idx, y, mask=mask)


@triton.jit
def _reversible_backward_step(ly, lz, gw, gs, z, y, x, go, w, s, dt, alpha, E, at, valid):
    """Step n + 1 undone from (z, y) = (z_{n+1}, y_{n+1}) with the exact inverse (3.7) and its adjoint taken
    (x = x_{n+1}; go = ∂L/∂y_n from the outputs), ∂L/∂x_{n+1} stored over x at ``at``; only where ``valid``.
    Returns the adjoints, the sums and (z_n, y_n)."""
    yp = y - dt * (s * z)  # (3.7, y)
    th = tanh(w * yp + x)
    force = th + alpha * yp
    ly2, lz2, ga, gw2, gs2 = _adjoint_step(ly, lz, gw, gs, z, yp, force, th, w, s, dt, alpha)
    tl.store(E + at, ga, mask=valid)
    zp = z + dt * (s * force)  # (3.7, z)
    return (tl.where(valid, ly2 + go, ly), tl.where(valid, lz2, lz), tl.where(valid, gw2, gw),
            tl.where(valid, gs2, gs), tl.where(valid, zp, z), tl.where(valid, yp, y))


@triton.jit
def _reversible_backward_four(ly, lz, gw, gs, z, y, x0, o0, x1, o1, x2, o2, x3, o3, w, s, dt, alpha, E, at, n, zero,
                              mask, H):
    """Steps n + 1, n, n − 1, n − 2 undone (:func:`_reversible_backward_step`), x0 … x3 and o0 … o3 their inputs
    and output gradients."""
    ly, lz, gw, gs, z, y = _reversible_backward_step(ly, lz, gw, gs, z, y, x0, o0, w, s, dt, alpha, E, at + n * H,
                                                     mask & (zero + n >= 0))
    ly, lz, gw, gs, z, y = _reversible_backward_step(ly, lz, gw, gs, z, y, x1, o1, w, s, dt, alpha, E,
                                                     at + (n - 1) * H, mask & (zero + n >= 1))
    ly, lz, gw, gs, z, y = _reversible_backward_step(ly, lz, gw, gs, z, y, x2, o2, w, s, dt, alpha, E,
                                                     at + (n - 2) * H, mask & (zero + n >= 2))
    return _reversible_backward_step(ly, lz, gw, gs, z, y, x3, o3, w, s, dt, alpha, E, at + (n - 3) * H,
                                     mask & (zero + n >= 3))


@triton.jit
def _reversible_backward(E, Wv, Cv, K, Z, Y, GO, DZ, DY, GZ, GY, GWS, B, T, H, BLOCK: tl.constexpr,
                         HAS_DZ: tl.constexpr = True, HAS_DY: tl.constexpr = True):
    """E (B, T, H): x_n on entry, ∂L/∂x_n on exit; Z, Y: the final state, read (the states back to the initial one
    are rebuilt in registers); DZ, DY, GZ, GY, GWS as in :func:`_backward`. Eight steps per trip, the next eight
    inputs and output gradients loaded before them (below the ∂L/∂x_n the trip overwrites)."""
    idx, mask, b, j, dt, alpha, w, s = _lanes(Wv, Cv, K, B, H, BLOCK)
    zero = idx * 0
    z = tl.load(Z + idx, mask=mask, other=0.0)
    y = tl.load(Y + idx, mask=mask, other=0.0)
    lz, ly = _final_adjoints(DZ, DY, GO, idx, mask, b, j, T, H, HAS_DZ, HAS_DY)
    gw = tl.zeros((BLOCK,), dtype=w.dtype)
    gs = tl.zeros((BLOCK,), dtype=w.dtype)
    xs = E + b * T * H + j  # x_{n+1} at xs + n·H; ∂L/∂y_n at go + n·H
    go = GO + b * T * H + j - H
    x0, x1, x2, x3 = _four_ahead(xs, zero, mask, 0, T - 1, -1, H, T)
    o0, o1, o2, o3 = _four_ahead(go, zero, mask, 1, T - 1, -1, H, T)
    x4, x5, x6, x7 = _four_ahead(xs, zero, mask, 0, T - 5, -1, H, T)
    o4, o5, o6, o7 = _four_ahead(go, zero, mask, 1, T - 5, -1, H, T)
    at = b * T * H + j
    for i in range(0, T, 8):
        n = T - 1 - i  # steps n + 1, n, …, n − 6 of the sequence
        u0, u1, u2, u3 = _four_ahead(xs, zero, mask, 0, n - 8, -1, H, T)
        v0, v1, v2, v3 = _four_ahead(go, zero, mask, 1, n - 8, -1, H, T)
        u4, u5, u6, u7 = _four_ahead(xs, zero, mask, 0, n - 12, -1, H, T)
        v4, v5, v6, v7 = _four_ahead(go, zero, mask, 1, n - 12, -1, H, T)
        ly, lz, gw, gs, z, y = _reversible_backward_four(ly, lz, gw, gs, z, y, x0, o0, x1, o1, x2, o2, x3, o3, w, s,
                                                         dt, alpha, E, at, n, zero, mask, H)
        ly, lz, gw, gs, z, y = _reversible_backward_four(ly, lz, gw, gs, z, y, x4, o4, x5, o5, x6, o6, x7, o7, w, s,
                                                         dt, alpha, E, at, n - 4, zero, mask, H)
        x0, x1, x2, x3, x4, x5, x6, x7 = u0, u1, u2, u3, u4, u5, u6, u7
        o0, o1, o2, o3, o4, o5, o6, o7 = v0, v1, v2, v3, v4, v5, v6, v7
    _store_adjoints(GZ, GY, GWS, lz, ly, gw, gs, s, idx, mask, B, H)


def _adjoint_buffers(like: torch.Tensor, grad_z, grad_y):
    """The backward kernels' buffers: ∂L/∂(z_0, y_0) out; ∂L/∂(z_T, y_T) in (where autograd passed none, a buffer
    the kernel does not read: it starts from zero with no zero-filled tensor); the rows' ∂L/∂w, ∂L/∂c (2, B, H)."""
    B, H = like.shape[0], like.shape[-1]
    GZ, GY = like.new_empty(B, H), like.new_empty(B, H)
    DZ = GZ if grad_z is None else grad_z.contiguous()
    DY = GY if grad_y is None else grad_y.contiguous()
    return GZ, GY, DZ, DY, like.new_empty(2, B, H)


class UnICORNNSequence(torch.autograd.Function):
    """``apply(enc, w, c, z0, y0, dt, alpha) -> (ys, z_T, y_T)``: the kernels copy the initial state in and the
    final one out themselves, and scale ∂L/∂σ̂(c) to ∂L/∂c per lane (fewer torch operators a step)."""

    @staticmethod
    def forward(ctx, enc, w, c, z0, y0, dt, alpha):
        B, T, H = enc.shape
        enc, w, c, z0, y0 = enc.contiguous(), w.contiguous(), c.contiguous(), z0.contiguous(), y0.contiguous()
        Z, Y = enc.new_empty(B, T + 1, H), enc.new_empty(B, T + 1, H)
        zT, yT = enc.new_empty(B, H), enc.new_empty(B, H)
        consts = on_device([dt, alpha], enc.dtype, enc.device)
        _forward[(triton.cdiv(B * H, BLOCK),)](enc, w, c, consts, z0, y0, Z, Y, zT, yT, B, T, H, BLOCK=BLOCK)
        ctx.save_for_backward(enc, w, c, consts, Z, Y)
        ctx.set_materialize_grads(False)
        return Y[:, 1:], zT, yT

    @staticmethod
    @kernel_backward("cuda")
    def backward(ctx, grad_ys, grad_z, grad_y):
        enc, w, c, consts, Z, Y = ctx.saved_tensors
        B, T, H = enc.shape
        GZ, GY, DZ, DY, GWS = _adjoint_buffers(enc, grad_z, grad_y)
        grad_ys = torch.zeros_like(enc) if grad_ys is None else grad_ys.contiguous()
        G = torch.empty_like(enc)
        _backward[(triton.cdiv(B * H, BLOCK),)](enc, w, c, consts, Z, Y, grad_ys, DZ, DY, GZ, GY, G, GWS,
                                                B, T, H, BLOCK=BLOCK, HAS_DZ=grad_z is not None,
                                                HAS_DY=grad_y is not None)
        grad_w, grad_c = GWS.sum(1)  # one reduction for both parameters
        return G, grad_w, grad_c, GZ, GY, None, None


@in_chunks
def run(system, x, state, dt, unfolds=1, lags=(), **_):
    """One UnICORNN layer, "symplectic-euler", over ``x`` from ``state`` = (z0, y0)."""
    h = float(dt) / unfolds
    enc = system.encode(x)
    if unfolds != 1:  # the input held over L sub-steps (x encoded once)
        enc = enc.repeat_interleave(unfolds, dim=1)
    ys, z, y = UnICORNNSequence.apply(enc, system.w, system.c, state[0], state[1], h, system.alpha)
    if unfolds != 1:
        ys = ys[:, unfolds - 1::unfolds]
    return ys, (z, y)


class ReversibleUnICORNNSequence(torch.autograd.Function):
    """``apply(u, V, b, w, c, z0, y0, dt, alpha, L) -> (ys, z_T, y_T)``, as
    :class:`odelab.models.unicornn.ReversibleUnICORNN`: saves u, the parameters and the final state, nothing per
    step. Each sample of u drives L sub-steps of length dt (ys: (B, T·L, H)): it is encoded once, its encoding held
    over them, and its gradient is the sum of theirs, taken before the products with V and u."""

    @staticmethod
    def forward(ctx, u, V, b, w, c, z0, y0, dt, alpha, unfolds):
        enc = held_encoding(u, V, b, unfolds)  # x_n = V u_n + b, freed after the launch
        B, T, H = enc.shape
        w, c = w.contiguous(), c.contiguous()
        z, y = z0.contiguous().clone(), y0.contiguous().clone()  # initial state in, final state out
        ys = enc.new_empty(B, T, H)
        consts = on_device([dt, alpha], enc.dtype, enc.device)
        # no FMA contraction (here and in the backward): y_n − p undoes y_{n−1} + p exactly far more often when p is
        # the same rounded product on both sides (the C++ kernel measured ~10x less drift in float32)
        _reversible_forward[(triton.cdiv(B * H, BLOCK),)](enc, w, c, consts, z, y, ys, B, T, H, BLOCK=BLOCK,
                                                          enable_fp_fusion=False)
        ctx.save_for_backward(u, V, b, w, c, z, y)
        ctx.dt, ctx.alpha, ctx.unfolds = dt, alpha, unfolds
        ctx.set_materialize_grads(False)
        return ys, z, y

    @staticmethod
    @kernel_backward("cuda")
    def backward(ctx, grad_ys, grad_z, grad_y):
        u, V, b, w, c, z, y = ctx.saved_tensors
        grad_x = held_encoding(u, V, b, ctx.unfolds)  # recomputed x_n, overwritten with ∂L/∂x_n
        B, T, H = grad_x.shape
        GZ, GY, DZ, DY, GWS = _adjoint_buffers(grad_x, grad_z, grad_y)
        grad_ys = torch.zeros_like(grad_x) if grad_ys is None else grad_ys.contiguous()
        consts = on_device([ctx.dt, ctx.alpha], grad_x.dtype, grad_x.device)
        _reversible_backward[(triton.cdiv(B * H, BLOCK),)](grad_x, w, c, consts, z, y, grad_ys, DZ, DY, GZ, GY,
                                                           GWS, B, T, H, BLOCK=BLOCK, HAS_DZ=grad_z is not None,
                                                           HAS_DY=grad_y is not None, enable_fp_fusion=False)
        if ctx.unfolds != 1:  # a sample's gradient: the sum over the sub-steps it drives
            grad_x = grad_x.view(B, u.shape[1], ctx.unfolds, H).sum(2)
        grad_u = grad_x @ V if ctx.needs_input_grad[0] else None
        grad_V = grad_x.flatten(0, 1).T @ u.flatten(0, 1) if ctx.needs_input_grad[1] else None
        grad_b = grad_x.sum((0, 1)) if ctx.needs_input_grad[2] else None
        grad_w, grad_c = GWS.sum(1)  # one reduction for both parameters
        return grad_u, grad_V, grad_b, grad_w, grad_c, GZ, GY, None, None, None


@in_chunks
def run_reversible(system, x, state, dt, unfolds=1, lags=(), **_):
    """One UnICORNN layer with the reversible backward (3.7), "symplectic-euler", over ``x`` from (z0, y0)."""
    ys, z, y = ReversibleUnICORNNSequence.apply(x, system.weight_input, system.bias, system.w, system.c, state[0],
                                                state[1], float(dt) / unfolds, system.alpha, unfolds)
    if unfolds != 1:
        ys = ys[:, unfolds - 1::unfolds]
    return ys, (z, y)
