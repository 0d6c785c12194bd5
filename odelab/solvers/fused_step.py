"""The adaptive loop's arithmetic around the vector field as C++ kernels (the CPU path of solves that record no
gradient): an attempted step of an explicit pair costs the field's evaluations plus ``stages + 1`` kernel calls,
where the torch loop spends ~100 small ops (stage sums, error norm, PI controller, accept/reject, dense
coefficients) and then stacks and searches its step records for the outputs.

- ``rk_begin``: the step clipped onto each sample's next landing point: h_step = min(h, target − t), whether it
  lands there, the time after it;
- ``rk_stage``: Y_i = y + Σ_j a_ij (h k_j) and the stage time t + c_i h (state dtype; float64 too when the field
  reads exact times);
- ``rk_finish``: err = Σ_i b_err_i (h k_i), the squared RMS ratio, accept, the PI factor, the next h, the
  landing index, the failure codes, the continuous-extension coefficients C_p = Σ_i P_ip (h k_i), the outputs
  inside each accepted step (y + θ (C_1 + θ (C_2 + …)), as the torch loop's dense output) and the new (y, k1),
  in place -- the equations of :mod:`.adaptive`, in the same order of operations per element (stage increments
  rounded to the state dtype before they are summed; ``-ffp-contract=off``: no fused multiply-adds that torch
  would not do, explicit ones where it does: addcmul's in the Horner sums); for a delay system it also pushes
  each accepted step onto the sample's ring of records (:class:`NativeHistory`);
- ``rk_history``: a delay system's y(t − τ) per sample from its ring (the torch loop's ``StepHistory.at``: the same
  record, θ and Horner sum, bit for bit; φ(t − τ) before t0);
- ``rk_emit``: the outputs a segment owes from the last accepted step before it;
- ``rk_combine``: a fixed step's stage sum or update over every state block (:mod:`.fused_fixed`).

Sums over stages and the RMS run in another order than torch's matrix products, so the values agree with the
torch loop to round-off and the steps are the same, except where the controller amplifies round-off (stiff,
stability-limited steps; float32 error estimates). The state, the k_i and the coefficients are float32 or float64
(one dtype), times and steps float64, counters int64, masks bool. Built on first use
(:class:`.native.NativeLibrary`, ~1-2 s, with OpenMP where the compiler has it).
"""
from __future__ import annotations

import ctypes
import math

import torch
from torch import Tensor

from .dense import StepCopies
from .derivatives import forward_mode_or_transform
from .native import NativeLibrary
from .solution import Status

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

typedef int64_t i64;
typedef unsigned char u8;

namespace {

template <typename T> inline T min_nan(T a, T b) { return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : (b < a ? b : a); }
template <typename T> inline T max_nan(T a, T b) { return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : (b > a ? b : a); }

// Every elementwise loop runs over the flat (B·D) state with the step size expanded per element (h_elem), so
// that it vectorises whatever D is; only the controller loops over samples.

// Large states split their loops between ``threads`` OpenMP threads (torch's thread count, passed by the caller;
// blocks of BLOCK elements, each block's loops vectorised); a build without OpenMP ignores the pragmas.
constexpr i64 BLOCK = 4096;

template <typename S>
void begin(i64 B, i64 D, int threads, const double* t, const double* h, const i64* landing, const double* points,
           double* h_step, double* t_land, u8* landed, S* __restrict h_elem) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (i64 b = 0; b < B; ++b) {
    const double target = points[landing[b]], gap = target - t[b];
    const bool l = (h[b] >= gap) || (t[b] + h[b] >= target);
    const double hs = min_nan(h[b], gap);
    h_step[b] = hs;
    t_land[b] = l ? target : t[b] + hs;
    landed[b] = l;
    for (i64 d = 0; d < D; ++d) h_elem[b * D + d] = S(hs);
  }
}

template <typename F> void in_blocks(i64 E, int threads, F f) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (i64 c = 0; c < E; c += BLOCK) f(c, E - c < BLOCK ? E - c : BLOCK);
}

// out = y + Σ_j w_j (h k_j) on elements [first, first + n), term by term (the torch path's order: each increment
// h k_j rounded, then added)
template <typename S>
void combine(i64 first, i64 n, const S* __restrict y, S* const* k, i64 J, const double* w,
             const S* __restrict h_elem, S* __restrict out) {
  y += first; h_elem += first; out += first;
  for (i64 e = 0; e < n; ++e) out[e] = y[e];
  for (i64 j = 0; j < J; ++j) {
    const S wj = S(w[j]);
    const S* __restrict kj = k[j] + first;
    for (i64 e = 0; e < n; ++e) out[e] = out[e] + wj * (h_elem[e] * kj[e]);
  }
}

// Σ_j w_j (h k_j) over the nonzero w_j (zero where there is none), on elements [first, first + n)
template <typename S>
void increments(i64 first, i64 n, S* const* k, i64 J, const double* w, const S* __restrict h_elem,
                S* __restrict out) {
  h_elem += first; out += first;
  bool started = false;
  for (i64 j = 0; j < J; ++j) {
    if (w[j] == 0.0) continue;
    const S wj = S(w[j]);
    const S* __restrict kj = k[j] + first;
    if (started) for (i64 e = 0; e < n; ++e) out[e] = out[e] + wj * (h_elem[e] * kj[e]);
    else for (i64 e = 0; e < n; ++e) out[e] = wj * (h_elem[e] * kj[e]);
    started = true;
  }
  if (!started) for (i64 e = 0; e < n; ++e) out[e] = S(0);
}

template <typename S>
void stage_times(i64 B, int threads, const double* t, const double* h, double c, S* t_col, double* t_exact) {
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (i64 b = 0; b < B; ++b) {
    t_col[b] = S(t[b]) + S(c) * S(h[b]);
    if (t_exact) t_exact[b] = t[b] + c * h[b];
  }
}

// y(τ) = y + θ (C_1 + θ (C_2 + … θ C_m)) at the outputs τ ≤ until of sample b not written yet, θ = (τ − start) / h
// (the torch path's Horner order, with its addcmul's fused multiply-adds); C_p of element e at coef[e · stride_e + p · stride_p]. The outputs are
// (J, B, D): the samples of a batch move through the output times together, so that one attempt's writes fall
// into a few rows (a (B, J, D) layout cost a TLB miss per sample and attempt: FHN 1280, 186 -> 80 us a call)
template <typename S>
void emit(i64 b, i64 B, i64 D, i64 m, i64 J, double start, double h, double until, const S* y, const S* coef,
          i64 stride_e, i64 stride_p, const double* out_times, S* out, i64* next) {
  i64 j = next[b];
  for (; j < J && out_times[j] <= until; ++j) {
    const S theta = S((out_times[j] - start) / h);
    S* o = out + (j * B + b) * D;
    for (i64 d = 0; d < D; ++d) {
      const i64 e = b * D + d;
      S acc = coef[e * stride_e + (m - 1) * stride_p];
      for (i64 p = m - 2; p >= 0; --p) acc = std::fma(theta, acc, coef[e * stride_e + p * stride_p]);
      o[d] = std::fma(theta, acc, y[e]);
    }
  }
  next[b] = j;
}

struct Control {
  double rtol, atol, alpha, beta, safety, factor_min, factor_max, dt_min, dt_max, max_steps;
  double underflow, nonfinite, max_steps_code, success;
};

// A delay solve's dense history: per sample, a ring of its last W accepted steps (start, length, end, state,
// continuous-extension coefficients (D, m)), count[b] of them pushed so far (slot = index mod W). W = 0: none.
struct Ring {
  i64 W;
  double *start, *length, *end;
  void *y, *coef;
  i64* count;
  double reach, eps;  // how far back reads go (τ_max) and the round-off allowance of t − τ
};

template <typename S>
void push(const Ring& r, i64 b, i64 D, i64 m, double start, double h, double end, const S* y, const S* coef, i64 E) {
  const i64 w = r.count[b] % r.W, at = b * r.W + w;
  r.start[at] = start; r.length[at] = h; r.end[at] = end;
  S* ry = (S*)r.y + at * D;
  S* rc = (S*)r.coef + at * D * m;
  for (i64 d = 0; d < D; ++d) {
    ry[d] = y[b * D + d];
    for (i64 p = 0; p < m; ++p) rc[d * m + p] = coef[p * E + b * D + d];
  }
  r.count[b] += 1;
}

// whether sample b's next push would overwrite a record that reads at times ≥ t − reach may still select (the
// oldest kept record when the ring is full): then the ring must grow first
inline bool ring_full(const Ring& r, i64 b, double t) {
  const i64 n = r.count[b];
  return n >= r.W && r.end[b * r.W + n % r.W] >= t - r.reach - r.eps;
}

// the end of an attempt, in place on the loop state; returns the number of samples still active
template <typename S>
i64 finish(i64 B, i64 D, i64 stages, i64 m, i64 J, bool check_max_steps, bool has_dt_max, int threads,
           const Control& q,
           const double* b_err, const double* dense_t, S* __restrict y, const S* __restrict y_new, S* const* k,
           S* __restrict k1, S* __restrict coef, S* __restrict ratio, const S* __restrict h_elem, double* t,
           double* h, const double* h_step, const double* t_land, const u8* landed, S* prev, i64* landing,
           i64* steps, i64* code, u8* active, i64* accepted, double t_stop, double t_end, double* last_t,
           double* last_h, S* last_y, S* last_coef, const double* out_times, S* out, i64* next, const Ring& ring,
           i64* grow) {
  const i64 E = B * D;
  const S rtol = S(q.rtol), atol = S(q.atol);
  in_blocks(E, threads, [&](i64 first, i64 n) {
    // continuous-extension coefficients, (m, B·D): row p = Σ_i P_ip (h k_i)
    for (i64 p = 0; p < m; ++p) increments(first, n, k, stages, dense_t + p * stages, h_elem, coef + p * E);
    // the squared error ratio per element, err / (atol + rtol max(|y|, |y_new|))
    increments(first, n, k, stages, b_err, h_elem, ratio);
    for (i64 e = first; e < first + n; ++e) {
      const S scale = max_nan(std::fabs(y[e]), std::fabs(y_new[e])) * rtol + atol;
      const S x = ratio[e] / scale;
      ratio[e] = x * x;
    }
  });
  const S inv_dim = S(1.0 / double(D)), tiny = S(1e-20), floor_log = S(std::log(1e-8));
  const S half_alpha = S(-q.alpha / 2), half_beta = S(q.beta / 2), log_safety = S(std::log(q.safety));
  const S fmin = S(q.factor_min), fmax = S(q.factor_max);
  const S* __restrict k_new = k[stages - 1];
  i64 still = 0, full = 0;
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static) reduction(+ : still, full)
  for (i64 b = 0; b < B; ++b) {
    const i64 o = b * D;
    S r2 = 0;
    for (i64 d = 0; d < D; ++d) r2 = r2 + ratio[o + d] * inv_dim;
    const bool act = active[b] != 0;
    const bool acc = (r2 <= S(1)) && act;
    const S log_r2 = std::log(r2 != r2 ? r2 : (r2 < tiny ? tiny : r2));
    S factor = std::exp(prev[b] + half_alpha * log_r2);
    if (factor != factor) factor = fmin;
    factor = factor < fmin ? fmin : (factor > fmax ? fmax : factor);
    const S bound = acc ? fmax : S(1);
    factor = bound < factor ? bound : factor;
    const double t0 = t[b], hs = h_step[b];
    double h_next = (hs > 0 ? hs : h[b]) * double(factor);
    if (has_dt_max) h_next = min_nan(h_next, q.dt_max);
    const double ta = acc ? t_land[b] : t0;
    if (acc) {  // outputs inside the step, then the step becomes the sample's last accepted one
      emit(b, B, D, m, J, t0, hs, ta, y, coef, 1, E, out_times, out, next);
      if (ta > t0 && ring.W > 0) push(ring, b, D, m, t0, hs, ta, y, coef, E);
      if (ta > t0) {
        last_t[b] = t0; last_h[b] = hs;
        for (i64 d = 0; d < D; ++d) {
          last_y[o + d] = y[o + d];
          for (i64 p = 0; p < m; ++p) last_coef[(o + d) * m + p] = coef[p * E + o + d];
        }
      }
      for (i64 d = 0; d < D; ++d) { y[o + d] = y_new[o + d]; k1[o + d] = k_new[o + d]; }
      accepted[b] += 1;
    }
    const bool stuck = (act != acc) && ((t0 + h_next) - t0 <= q.dt_min);
    const i64 s = steps[b] + (act ? 1 : 0);
    steps[b] = s;
    i64 c = code[b];
    if (stuck) c = (r2 < std::numeric_limits<S>::infinity()) ? i64(q.underflow) : i64(q.nonfinite);
    if (check_max_steps && act && double(s) >= q.max_steps && ta < t_end) c = i64(q.max_steps_code);
    code[b] = c;
    if (acc) prev[b] = (log_r2 < floor_log ? floor_log : log_r2) * half_beta + log_safety;
    if (act) h[b] = h_next;
    landing[b] += (acc && landed[b]) ? 1 : 0;
    t[b] = ta;
    const bool going = (c == i64(q.success)) && (ta < t_stop);
    active[b] = going;
    still += going;
    if (ring.W > 0 && going) full += ring_full(ring, b, ta);
  }
  if (grow) *grow = full;
  return still;
}

// y(s_b) per sample from its ring, s_b in the past of the solve: the record of the first step ending at or after
// s − eps (``right``: the first ending after max(s, t0) + eps), y + θ (C_1 + θ (C_2 + …)), θ = (s − start) / length
// (the torch path's StepHistory.at); before[b] = 1 where the history φ is read instead (s ≤ t0 + eps; ``right``:
// s < t0 − eps; or no record yet). Returns how many samples read φ.
template <typename S>
i64 history(i64 B, i64 D, i64 m, bool right, double t0, const Ring& r, const double* s, S* out, u8* before) {
  i64 count_before = 0;
  for (i64 b = 0; b < B; ++b) {
    const double sb = s[b];
    const i64 n = r.count[b];
    const bool phi = (right ? sb < t0 - r.eps : sb <= t0 + r.eps) || n == 0;
    before[b] = phi;
    if (phi) { ++count_before; continue; }
    const double key = right ? (sb < t0 ? t0 : sb) + r.eps : sb - r.eps;
    // binary search over the kept records (logical indices lo … n − 1, ends ascending)
    i64 lo = n > r.W ? n - r.W : 0, hi = n - 1;
    const double* end = r.end + b * r.W;
    while (lo < hi) {
      const i64 mid = lo + (hi - lo) / 2;
      const double e = end[mid % r.W];
      if (right ? e > key : e >= key) hi = mid; else lo = mid + 1;
    }
    const i64 at = b * r.W + lo % r.W;
    const S theta = S((sb - r.start[at]) / r.length[at]);
    const S* y = (const S*)r.y + at * D;
    const S* c = (const S*)r.coef + at * D * m;
    for (i64 d = 0; d < D; ++d) {
      S acc = c[d * m + m - 1];
      for (i64 p = m - 2; p >= 0; --p) acc = std::fma(theta, acc, c[d * m + p]);
      out[b * D + d] = std::fma(theta, acc, y[d]);
    }
  }
  return count_before;
}

// out = y + Σ_j w_j k_j on elements [first, first + n), term by term with fused multiply-adds: what the fixed-step
// torch path's torch.add(x, k_j, alpha=w_j) computes on a CPU, bit for bit
template <typename S>
void axpys(i64 first, i64 n, const S* __restrict y, S* __restrict out, void* const* k, i64 J, const double* w) {
  y += first; out += first;
  for (i64 e = 0; e < n; ++e) out[e] = y[e];
  for (i64 j = 0; j < J; ++j) {
    const S wj = S(w[j]);
    const S* __restrict kj = (const S*)k[j] + first;
    for (i64 e = 0; e < n; ++e) out[e] = std::fma(wj, kj[e], out[e]);
  }
}

template <typename S> void stage(const i64* n, void* const* p, const double* s) {
  const i64 B = n[0], E = n[0] * n[1], J = n[2];
  const int threads = int(n[3]);
  in_blocks(E, threads, [&](i64 first, i64 count) {
    combine<S>(first, count, (const S*)p[0], (S* const*)(p + 7), J, s + 1, (const S*)p[3], (S*)p[1]);
  });
  stage_times<S>(B, threads, (const double*)p[5], (const double*)p[4], s[0], (S*)p[2], (double*)p[6]);
}

}  // namespace

extern "C" {
// sizes (B, D, threads); pointers h_elem t h landing points h_step t_land landed
void rk_begin(int f64, const i64* n, void* const* p, const double*) {
  if (f64) begin<double>(n[0], n[1], int(n[2]), (const double*)p[1], (const double*)p[2], (const i64*)p[3],
                         (const double*)p[4], (double*)p[5], (double*)p[6], (u8*)p[7], (double*)p[0]);
  else begin<float>(n[0], n[1], int(n[2]), (const double*)p[1], (const double*)p[2], (const i64*)p[3], (const double*)p[4],
                    (double*)p[5], (double*)p[6], (u8*)p[7], (float*)p[0]);
}

// sizes (B, D, J, threads); pointers y out t_col h_elem h t t_exact(or null) k_0 … k_{J-1}; scalars c a_0 … a_{J-1}
void rk_stage(int f64, const i64* n, void* const* p, const double* s) {
  if (f64) stage<double>(n, p, s); else stage<float>(n, p, s);
}

// sizes (blocks, J, threads, E_0 … E_{blocks-1}); pointers per block y out k_0 … k_{J-1}; scalars w_0 … w_{J-1}:
// out = y + Σ_j w_j k_j for every state block (a fixed step's stage sum, w_j = h a_ij, or its update, w_j = h b_j)
void rk_combine(int f64, const i64* n, void* const* p, const double* w) {
  const i64 blocks = n[0], J = n[1];
  const int threads = int(n[2]);
  for (i64 b = 0; b < blocks; ++b) {
    void* const* q = p + b * (2 + J);
    in_blocks(n[3 + b], threads, [&](i64 first, i64 count) {
      if (f64) axpys<double>(first, count, (const double*)q[0], (double*)q[1], q + 2, J, w);
      else axpys<float>(first, count, (const float*)q[0], (float*)q[1], q + 2, J, w);
    });
  }
}

// sizes (B, D, m, J); pointers last_y last_coef (B·D, m) t last_t last_h out_times out next: the outputs at or
// before each sample's t, from its last accepted step (a segment's start)
void rk_emit(int f64, const i64* n, void* const* p, const double*) {
  const i64 B = n[0], D = n[1], m = n[2], J = n[3];
  const double *t = (const double*)p[2], *last_t = (const double*)p[3], *last_h = (const double*)p[4];
  for (i64 b = 0; b < B; ++b) {
    if (f64) emit<double>(b, B, D, m, J, last_t[b], last_h[b], t[b], (const double*)p[0], (const double*)p[1], m, 1,
                          (const double*)p[5], (double*)p[6], (i64*)p[7]);
    else emit<float>(b, B, D, m, J, last_t[b], last_h[b], t[b], (const float*)p[0], (const float*)p[1], m, 1,
                     (const double*)p[5], (float*)p[6], (i64*)p[7]);
  }
}

// sizes (B, D, stages, m, J, check_max_steps, has_dt_max, threads); pointers
//   0 y, 1 y_new, 2 k1, 3 coef (m, B·D), 4 ratio (B·D), 5 h_elem, 6 prev, 7 last_y, 8 last_coef (B·D, m), 9 out,
//   10 t, 11 h, 12 h_step, 13 t_land, 14 landed, 15 landing, 16 steps, 17 code, 18 active, 19 accepted,
//   20 t_stop, 21 t_end, 22 last_t, 23 last_h, 24 out_times, 25 next, 26… k_0 … k_{stages-1};
//   26 ring start, 27 length, 28 end, 29 y, 30 coef, 31 count, 32 grow (i64, out), 33… k_0 … k_{stages-1}
//   (sizes[8] = W, the ring's length, 0 without one);
// scalars rtol atol alpha beta safety factor_min factor_max dt_min dt_max max_steps underflow nonfinite
//   max_steps_code success reach eps, b_err (stages), P^T (m × stages, row-major). Returns the number still active;
//   *grow = how many active samples' rings are full of records still needed.
i64 rk_finish(int f64, const i64* n, void* const* p, const double* s) {
  const Control q{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13]};
  const Ring ring{n[8], (double*)p[26], (double*)p[27], (double*)p[28], p[29], p[30], (i64*)p[31], s[14], s[15]};
  const i64 stages = n[2];
#define ODELAB_FINISH(S)                                                                                         \
  return finish<S>(n[0], n[1], stages, n[3], n[4], n[5] != 0, n[6] != 0, int(n[7]), q, s + 16, s + 16 + stages, (S*)p[0],  \
                   (const S*)p[1], (S* const*)(p + 33), (S*)p[2], (S*)p[3], (S*)p[4], (const S*)p[5],            \
                   (double*)p[10], (double*)p[11], (const double*)p[12], (const double*)p[13], (const u8*)p[14],  \
                   (S*)p[6], (i64*)p[15], (i64*)p[16], (i64*)p[17], (u8*)p[18], (i64*)p[19],                     \
                   *(const double*)p[20], *(const double*)p[21], (double*)p[22], (double*)p[23], (S*)p[7],       \
                   (S*)p[8], (const double*)p[24], (S*)p[9], (i64*)p[25], ring, (i64*)p[32])
  if (f64) { ODELAB_FINISH(double); } else { ODELAB_FINISH(float); }
#undef ODELAB_FINISH
}

// sizes (B, D, m, W, right); pointers s (B, float64) out (B, D) before (B, bool) ring start length end y coef count;
// scalars t0 eps reach. Returns how many samples read the history φ (before[b] set; out[b] left as it was).
i64 rk_history(int f64, const i64* n, void* const* p, const double* s) {
  const Ring ring{n[3], (double*)p[3], (double*)p[4], (double*)p[5], p[6], p[7], (i64*)p[8], s[2], s[1]};
  if (f64) return history<double>(n[0], n[1], n[2], n[4] != 0, s[0], ring, (const double*)p[0], (double*)p[1], (u8*)p[2]);
  return history<float>(n[0], n[1], n[2], n[4] != 0, s[0], ring, (const double*)p[0], (float*)p[1], (u8*)p[2]);
}
}
"""


LIBRARY = NativeLibrary("odelab_rk", SOURCE, flags=("-ffp-contract=off",), optional_flags=("-fopenmp",))
PARALLEL_ELEMENTS = 1 << 16  # states of at least this many elements (batch × dim) use torch's thread count
_SUCCESS = int(Status.SUCCESS)


def usable(solver, y: Tensor, k1: Tensor) -> bool:
    """Whether the fused loop can run this solve: CPU, float32/float64, no forward-mode delay tangents, and no
    gradient to record (grad mode off, or none of the state, f(t0, y0), a learnable delay or the system's
    parameters requires one)."""
    if solver.device.type != "cpu" or solver.dtype not in (torch.float32, torch.float64) or solver.sensitive \
            or solver.state_dependent or solver.resets is not None:
        return False
    return not records_gradient(solver, y, k1) and LIBRARY.available()


def records_gradient(solver, y: Tensor, k1: Tensor) -> bool:
    """Whether an adaptive solve records a gradient: grad mode on and the state, f(t0, y0), a learnable delay or the
    system's parameters require one (f(t0, y0) may not show every dependence: a delay or a parameter read later);
    also, whatever grad mode says, under forward-mode AD or a ``torch.func`` transform (``derivatives``)."""
    if forward_mode_or_transform():
        return True
    if not torch.is_grad_enabled():
        return False
    return (y.requires_grad or k1.requires_grad or any(tau is not None for tau in solver.learnable)
            or trainable(solver.system))


def records_state_gradient(system, state) -> bool:
    """Whether a solve from ``state`` records a gradient: grad mode on and the state or the system's parameters
    require one (a plain callable's closed-over tensors are not seen); also under forward-mode AD or a
    ``torch.func`` transform (``derivatives``)."""
    return forward_mode_or_transform() or (
        torch.is_grad_enabled() and (any(x.requires_grad for x in state) or trainable(system)))


def trainable(system) -> bool:
    """Whether ``system`` has a parameter that requires grad (a callable's own module included: it is a submodule)."""
    return isinstance(system, torch.nn.Module) and any(p.requires_grad for p in system.parameters())


def _pointers(tensors) -> ctypes.Array:
    return (ctypes.c_void_p * len(tensors))(*[None if x is None else x.data_ptr() for x in tensors])


class RingHistory:
    """The dense history of a delay solve in a fused loop: per sample a ring of its last ``window`` accepted steps
    (start, length, end, state, continuous-extension coefficients) that the finish kernel pushes onto and a lookup
    kernel reads -- the lookups of :class:`.step_history.StepHistory` (same record, same θ, the same Horner sum) without
    its per-read torch ops; subclasses give ``at`` (its interface) on their device. A ring whose oldest record a
    read may still need is doubled (``grow``) before a push would overwrite it."""

    def __init__(self, solver):
        torch_history = solver.history
        self.before, self.eps, self.tau_max, self.t0 = (torch_history.before, torch_history.eps,
                                                        torch_history.tau_max, torch_history.t0)
        self.tangents = False
        self.batch, self.dim, self.m, self.dtype = solver.batch, solver.dim, len(solver.tab.dense[0]), solver.dtype
        self.window = 16
        b, w, d, m, device = self.batch, self.window, self.dim, self.m, solver.device
        self.start, self.length, self.end = (torch.zeros(b, w, dtype=torch.float64, device=device) for _ in range(3))
        self.y = torch.zeros(b, w, d, dtype=self.dtype, device=device)
        self.coef = torch.zeros(b, w, d, m, dtype=self.dtype, device=device)
        self.count = torch.zeros(b, dtype=torch.int64, device=device)

    def buffers(self) -> list[Tensor]:
        return [self.start, self.length, self.end, self.y, self.coef, self.count]

    def grow(self) -> None:
        """Double the rings, each record moving to its slot (index mod 2W) of the longer one."""
        old, w, device = self.window, 2 * self.window, self.count.device
        logical = (self.count.unsqueeze(1) - old).clamp_min(0) + torch.arange(old, device=device)  # (B, old)
        source, target = logical % old, logical % w
        rows = torch.arange(self.batch, device=device).unsqueeze(1)
        for name in ("start", "length", "end", "y", "coef"):
            x = getattr(self, name)
            grown = x.new_zeros(self.batch, w, *x.shape[2:])
            grown[rows, target] = x[rows, source]
            setattr(self, name, grown)
        self.window = w

    def short(self, t: Tensor, active: Tensor, pushes: int) -> Tensor:
        """Whether some active sample's next ``pushes`` pushes would overwrite a record that reads at times ≥ t − τ_max
        may still select (a 0-d bool tensor: no host read)."""
        last = self.count + (pushes - 1) - self.window  # the newest record those pushes overwrite
        rows = torch.arange(self.batch, device=t.device)
        end = self.end[rows, last.clamp_min(0) % self.window]
        return (active & (last >= 0) & (end >= t - self.tau_max - self.eps)).any()


class NativeHistory(RingHistory):
    """:class:`RingHistory` on the CPU: rings pushed by ``rk_finish``, read by ``rk_history``."""

    def __init__(self, solver, kernel):
        super().__init__(solver)
        self.kernel, self.f64 = kernel, ctypes.c_int(solver.dtype == torch.float64)
        self.kernel.restype = ctypes.c_int64
        self.scalars = (ctypes.c_double * 3)(self.t0, self.eps, self.tau_max)

    def at(self, s: Tensor, right: bool = False) -> Tensor:
        """y(s) per sample (s: (batch,) float64), as :meth:`.step_history.StepHistory.at`."""
        s = s.detach().to(torch.float64).contiguous()
        out = torch.empty(self.batch, self.dim, dtype=self.dtype)
        before = torch.empty(self.batch, dtype=torch.bool)
        sizes = (ctypes.c_int64 * 5)(self.batch, self.dim, self.m, self.window, int(right))
        if self.kernel(self.f64, sizes, _pointers([s, out, before, *self.buffers()]), self.scalars):
            out = torch.where(before.unsqueeze(1), self.before(s), out)
        return out


class FusedLoop:
    """The adaptive loop of :class:`.adaptive._Integrator` with the arithmetic around the field in :data:`SOURCE`'s
    kernels, on state buffers updated in place (fixed addresses: the kernels' argument arrays are built once per
    segment); the outputs are written as the steps are accepted, a delay system's history lives in per-sample rings
    of accepted steps (:class:`NativeHistory`), and the loop reads the number of active samples from the last
    kernel's return value."""

    def __init__(self, solver):
        tab, opts = solver.tab, solver.opts
        self.solver = solver
        self.stage_rows = [[j for j, _ in row] for row in solver.rows]
        self.stage_scalars = [(ctypes.c_double * (len(row) + 1))(tab.c[i], *(a for _, a in row))
                              for i, row in enumerate(solver.rows)]
        self.m = len(tab.dense[0])
        dense_t = [float(w) for column in zip(*tab.dense) for w in column]  # P^T, (m, stages)
        control = [opts.rtol, opts.atol, opts.alpha, opts.beta, opts.safety, opts.factor_min, opts.factor_max,
                   opts.dt_min, solver.dt_max if solver.dt_max < math.inf else 0.0, float(opts.max_steps),
                   *(float(int(status)) for status in (Status.STEP_UNDERFLOW, Status.NONFINITE, Status.MAX_STEPS,
                                                       Status.SUCCESS))]
        history = solver.history
        ring = [history.tau_max, history.eps] if history is not None else [0.0, 0.0]
        scalars = control + ring + [float(x) for x in tab.b_err] + dense_t
        self.finish_scalars = (ctypes.c_double * len(scalars))(*scalars)
        self.f64 = ctypes.c_int(solver.dtype == torch.float64)
        library = LIBRARY.library()
        self.begin, self.stage, self.emit, self.finish = library.rk_begin, library.rk_stage, library.rk_emit, library.rk_finish
        self.finish.restype = ctypes.c_int64
        self.history_kernel = library.rk_history

    def segment(self, carry, t_stop: float, out_times: list[float]) -> tuple:
        """Advance every sample to t ≥ t_stop; returns the outputs at ``out_times`` (batch, len, dim) and the new
        carry's fields (:class:`.adaptive._Carry`'s order)."""
        s, i64 = self.solver, ctypes.c_int64
        batch, dim, m, stages, dtype = s.batch, s.dim, self.m, s.tab.stages, s.dtype
        state = lambda x: x.detach().clone(memory_format=torch.contiguous_format)
        y, k1, t, h, prev, landing, steps, accepted, code = (state(getattr(carry, name)) for name in (
            "y", "k1", "t", "h", "prev", "landing", "steps", "accepted", "code"))
        restarts = carry.restarts
        last_t, last_h, last_y = state(carry.last_t), state(carry.last_h), state(carry.last_y)
        last_coef = state(carry.last_coef)
        stop = torch.tensor([t_stop], dtype=torch.float64)
        active = ((code == _SUCCESS) & (t < stop)).contiguous()
        times = torch.tensor(out_times, dtype=torch.float64)
        out = y.new_empty(len(out_times), batch, dim)  # (J, B, D), see emit()
        written = torch.zeros(batch, dtype=torch.int64)
        sizes = lambda *values: (i64 * len(values))(*values)
        self.emit(self.f64, sizes(batch, dim, m, len(out_times)),
                  _pointers([last_y, last_coef, t, last_t, last_h, times, out, written]), None)
        # scratch of one attempt, reused by the next
        h_step, t_land, landed = torch.empty_like(t), torch.empty_like(t), torch.empty_like(active)
        h_elem, ratio, coef = torch.empty_like(y), torch.empty_like(y), y.new_empty(m, batch * dim)
        ys = [None] + [torch.empty_like(y) for _ in range(1, stages)]
        t_cols = [None] + [y.new_empty(batch, 1) for _ in range(1, stages)]
        t_exact = [None] + [torch.empty_like(t) if s.exact_time else None for _ in range(1, stages)]
        # torch's threads for a large state (a parallel region costs a few µs: small ones run serial)
        threads = torch.get_num_threads() if batch * dim >= PARALLEL_ELEMENTS else 1
        begin_args = (self.f64, sizes(batch, dim, threads), _pointers([h_elem, t, h, landing, s.landing, h_step, t_land, landed]),
                      None)
        stage_args = [None] + [(self.f64, sizes(batch, dim, len(self.stage_rows[i]), threads),
                                _pointers([y, ys[i], t_cols[i], h_elem, h_step, t, t_exact[i]]
                                          + [k1] * len(self.stage_rows[i])), self.stage_scalars[i])
                               for i in range(1, stages)]
        # where k_j's address goes: (argument array, slot) for every stage that reads it, and the finish kernel
        ring = None if s.history is None else NativeHistory(s, self.history_kernel)
        grow = torch.zeros(1, dtype=torch.int64)

        def finish_pointers():
            return _pointers([y, ys[-1], k1, coef, ratio, h_elem, prev, last_y, last_coef, out, t, h, h_step, t_land,
                              landed, landing, steps, code, active, accepted, stop, s.t_end_tensor, last_t, last_h,
                              times, written] + (ring.buffers() if ring else [None] * 6) + [grow]
                             + [k1] * stages)

        finish_args = finish_pointers()
        slots = {j: [(stage_args[i][2], 7 + self.stage_rows[i].index(j))
                     for i in range(1, stages) if j in self.stage_rows[i]] + [(None, 33 + j)]
                 for j in range(1, stages)}
        finish_sizes = sizes(batch, dim, stages, m, len(out_times), 0, int(s.dt_max < math.inf), threads,
                             ring.window if ring else 0)
        budget = s.opts.max_steps - (int(steps.max()) if steps.numel() else 0)
        # a dense output: after each attempt, every sample's last accepted step, ending at its time (a rejected
        # attempt repeats the step before, which ends where the sample stands)
        copies = StepCopies(last_t, last_h, last_y, last_coef) if s.dense_pieces else None
        if copies is not None:
            copies.append(last_t, last_h, last_y, last_coef, t)
        going, attempted = int(active.sum()), 0
        keep = []  # the field's values of this attempt (their addresses are in the argument arrays)
        # a delay system's dense history reads the rings of accepted steps that the finish kernel fills
        torch_history = s.history
        if ring is not None:
            s.history = ring
        try:
            while going:
                if s.restarts:  # samples sitting on a jump of f re-evaluate their first stage
                    restart = s.on_jump(active, landing, t)
                    if bool(restart.any()):
                        restarts = restarts + restart
                        new_y, new_k1 = s.restart(y, k1, t, landing, restart)
                        y.copy_(new_y)
                        k1.copy_(new_k1)
                self.begin(*begin_args)
                inp = s.held_input(landing)
                end_col = None
                if s.restarts:  # stages ending a step on a jump of f see the time one ulp before it
                    end_col = s.end_time(t.to(dtype).unsqueeze(1), h_step.to(dtype).unsqueeze(1), landed, landing)
                keep.clear()
                for i in range(1, stages):
                    self.stage(*stage_args[i])
                    t_col = end_col if end_col is not None and s.tab.c[i] == 1.0 else t_cols[i]
                    k_i = s.field(t_exact[i], t_col, ys[i], inp)
                    if k_i.dtype != dtype or not k_i.is_contiguous():
                        k_i = k_i.to(dtype).contiguous()
                    keep.append(k_i)
                    address = k_i.data_ptr()
                    for array, slot in slots[i]:
                        (finish_args if array is None else array)[slot] = address
                attempted += 1
                finish_sizes[5] = int(attempted >= budget)
                going = self.finish(self.f64, finish_sizes, finish_args, self.finish_scalars)
                if copies is not None:
                    copies.append(last_t, last_h, last_y, last_coef, t)
                if ring is not None and int(grow):  # a ring holds only records still needed: double it first
                    ring.grow()
                    finish_sizes[8] = ring.window
                    finish_args = finish_pointers()  # its k_i slots: rewritten by the next attempt's stages
        finally:
            s.history = torch_history
        if copies is not None:
            s.pieces_kept = copies.pieces(s.sizes)
        out = out.transpose(0, 1)
        if len(out_times) and bool((written < len(out_times)).any()):  # times a sample never reached (it failed)
            unreached = torch.arange(len(out_times)).unsqueeze(0) >= written.unsqueeze(1)
            out = torch.where(unreached.unsqueeze(-1), math.nan, out)
        return out, (y, k1, t, h, prev, landing, steps, accepted, code, restarts, last_t, last_h, last_y, last_coef)
