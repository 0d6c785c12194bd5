"""The C++ source of every CPU kernel: ONE translation unit, compiled once per machine on first use.

Plain C++17 on raw pointers (no torch headers, no pybind11: it compiles in about a second and is called
through ``ctypes``). Matrix products go to the BLAS that ships inside ``libtorch_cpu`` (MKL's ``sgemm_`` /
``dgemm_``, declared weak: a build without them falls back to the plain loops below). Every cell has a
forward that stores only the states and a backward (BPTT) that recomputes its gates from the stored states
and writes the per-step pre-activation gradients; weight gradients are one GEMM over all steps in torch.

Layout: batch first, as odelab's sequences, ``(B, T, k)`` contiguous; one step is a ``(B, k)`` matrix with
row stride ``T k``. Each kernel is a template on the scalar type, exported as ``<name>_f32`` / ``<name>_f64``.
"""

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

typedef int64_t i64;

extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
            const int*, const float*, const int*, const float*, float*, const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*) __attribute__((weak));
}

namespace {

// ---- matrix products ---------------------------------------------------------------------------------
// Row-major C (M x N, ldc) = beta C + A B, A (M x K, lda), B (K x N, ldb). A layer x W^T is computed as
// x (W^T) with W^T passed contiguous from torch, so that every product here has this one form: the plain
// loops then vectorise over j (no reduction), and large products go to the BLAS.

template <typename S>
void mm_loops(i64 M, i64 N, i64 K, const S* __restrict__ A, i64 lda, const S* __restrict__ B, i64 ldb, S beta,
              S* __restrict__ C, i64 ldc) {
  for (i64 i = 0; i < M; ++i) {
    S* __restrict__ c = C + i * ldc;
    if (beta == S(0)) for (i64 j = 0; j < N; ++j) c[j] = S(0);
    else if (beta != S(1)) for (i64 j = 0; j < N; ++j) c[j] *= beta;
    for (i64 k = 0; k < K; ++k) {
      const S a = A[i * lda + k];
      const S* __restrict__ b = B + k * ldb;
      for (i64 j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

inline void blas(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                 int ldc) {
  const char t = 'N'; const float one = 1.0f;
  sgemm_(&t, &t, &m, &n, &k, &one, a, &lda, b, &ldb, &beta, c, &ldc);
}
inline void blas(int m, int n, int k, const double* a, int lda, const double* b, int ldb, double beta, double* c,
                 int ldc) {
  const char t = 'N'; const double one = 1.0;
  dgemm_(&t, &t, &m, &n, &k, &one, a, &lda, b, &ldb, &beta, c, &ldc);
}
inline bool have_blas(float*) { return sgemm_ != nullptr; }
inline bool have_blas(double*) { return dgemm_ != nullptr; }

i64 blas_threshold = 32 * 32 * 32;  // M N K at or above which the BLAS is called

template <typename S>
void mm(i64 M, i64 N, i64 K, const S* A, i64 lda, const S* B, i64 ldb, S beta, S* C, i64 ldc) {
  if (M == 0 || N == 0) return;
  if (K > 0 && M * N * K >= blas_threshold && have_blas((S*)nullptr) && lda < (1LL << 31) && ldb < (1LL << 31)
      && ldc < (1LL << 31)) {
    // row-major C = A B  <=>  column-major C^T = B^T A^T, and a row-major X (ld) is a column-major X^T (ld)
    blas((int)N, (int)M, (int)K, B, (int)ldb, A, (int)lda, beta, C, (int)ldc);
  } else {
    mm_loops(M, N, K, A, lda, B, ldb, beta, C, ldc);
  }
}

// ---- gate nonlinearities ------------------------------------------------------------------------------
// float: branch-free exp (Cephes expf: range reduction to |r| <= ln2/2, degree-7 polynomial, 2^k from the
// exponent bits) and tanh built on it, so that GCC vectorises the gate loops (std::exp/std::tanh are scalar
// libm calls and would dominate the step). About 1-2 ulp. double: std::exp / std::tanh.
inline float exp_fast(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float k = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - k * 0.693359375f) - k * (-2.12194440e-4f);
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const int32_t bits = ((int32_t)k + 127) << 23;
  float scale; std::memcpy(&scale, &bits, sizeof(float));
  return y * scale;
}
inline float tanh_fast(float x) {
  const float a = std::fabs(x);
  const float z = x * x;  // |x| < 0.625: odd polynomial (Cephes tanhf), else (1 − e^{−2|x|}) / (1 + e^{−2|x|})
  const float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                   + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  const float t = exp_fast(-2.0f * a);
  const float q = std::copysign((1.0f - t) / (1.0f + t), x);
  return a < 0.625f ? p : q;
}
inline float sigmoid(float x) { return 1.0f / (1.0f + exp_fast(-x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline float tanh_(float x) { return tanh_fast(x); }
inline double tanh_(double x) { return std::tanh(x); }

// =====================================================================================================
// LEM (000 eq. 3), "imex": z first from (z, y, u), then y from (y, z_new, u); decays explicit.
//   A (B,T,4d) = [a1 | az | a2 | ay]: on entry the encoded input (V u + b), on exit the pre-activations
//   s1 = W1 y + a1, sz = Wz y + az, s2 = W2 y + a2, sy = Wy z' + ay (the buffer is reused: no extra memory,
//   and the backward needs no recomputing product). Wgt = [W1; Wz; W2]^T (d x 3d), Wyt = Wy^T.
//   g1 = σ(s1), tz = tanh(sz), z' = z + h (g1 tz − g1 z);  g2 = σ(s2), ty = tanh(sy), y' = y + h (g2 ty − g2 y)
// =====================================================================================================
// The gated relaxation x' = x + h (σ(s) tanh(t) − σ(s) x) -- both LEM updates and the GRU-ODE Euler step.
template <typename S>
void relax_fwd(i64 d, S h, const S* __restrict__ s1, const S* __restrict__ sz, const S* __restrict__ z,
               S* __restrict__ out) {
  for (i64 j = 0; j < d; ++j) {
    const S g = sigmoid(s1[j]), t = tanh_(sz[j]);
    out[j] = z[j] + h * (g * t - g * z[j]);
  }
}
// g: in = dL/dz', out = dL/dz (through the explicit term); d1, dt: dL/ds1, dL/dsz
template <typename S>
void relax_bwd(i64 d, S h, const S* __restrict__ s1, const S* __restrict__ sz, const S* __restrict__ z,
               const S* __restrict__ gin, S* __restrict__ gout, S* __restrict__ d1, S* __restrict__ dt) {
  for (i64 j = 0; j < d; ++j) {
    const S g = sigmoid(s1[j]), t = tanh_(sz[j]), gj = gin[j];
    d1[j] = gj * h * (t - z[j]) * g * (S(1) - g);
    dt[j] = gj * h * g * (S(1) - t * t);
    gout[j] = gj - h * g * gj;
  }
}

template <typename S>
void lem_fwd(i64 B, i64 T, i64 d, S* A, const S* z0, const S* y0, const S* Wgt, const S* Wyt, double hd, S* Z,
             S* Y) {
  const S h = S(hd);
  const i64 ls = T * d, la = T * 4 * d;  // row strides of a step's states / pre-activations
  for (i64 n = 0; n < T; ++n) {
    const S* yp = n ? Y + (n - 1) * d : y0; const i64 lyp = n ? ls : d;
    const S* zp = n ? Z + (n - 1) * d : z0; const i64 lzp = n ? ls : d;
    S* a = A + n * 4 * d;
    mm(B, 3 * d, d, yp, lyp, Wgt, 3 * d, S(1), a, la);                    // [s1 s2 sz] += y [W1; Wz; W2]^T
    for (i64 b = 0; b < B; ++b) relax_fwd(d, h, a + b * la, a + b * la + d, zp + b * lzp, Z + n * d + b * ls);
    mm(B, d, d, Z + n * d, ls, Wyt, d, S(1), a + 3 * d, la);               // sy += z' Wy^T
    for (i64 b = 0; b < B; ++b)
      relax_fwd(d, h, a + b * la + 2 * d, a + b * la + 3 * d, yp + b * lyp, Y + n * d + b * ls);  // same form
  }
}

// dY: gradient of the outputs (nullptr = zero); gz, gy: in = gradients of the final state, out = of the
// initial state. dA (B,T,4d): gradients of the pre-activations (= of the encoded input). G: (B, d) scratch.
template <typename S>
void lem_bwd(i64 B, i64 T, i64 d, const S* A, const S* z0, const S* y0, const S* Wg, const S* Wy, double hd,
             const S* Z, const S* Y, const S* dY, S* gz, S* gy, S* dA) {
  const S h = S(hd);
  std::vector<S> G(B * d), H(B * d);
  const i64 ls = T * d, la = T * 4 * d;
  for (i64 n = T - 1; n >= 0; --n) {
    const S* yp = n ? Y + (n - 1) * d : y0; const i64 lyp = n ? ls : d;
    const S* zp = n ? Z + (n - 1) * d : z0; const i64 lzp = n ? ls : d;
    const S* a = A + n * 4 * d; S* da = dA + n * 4 * d;
    if (dY) for (i64 b = 0; b < B; ++b) for (i64 j = 0; j < d; ++j) gy[b * d + j] += dY[b * ls + n * d + j];
    for (i64 b = 0; b < B; ++b)  // y-update
      relax_bwd(d, h, a + b * la + 2 * d, a + b * la + 3 * d, yp + b * lyp, gy + b * d, H.data() + b * d,
                da + b * la + 2 * d, da + b * la + 3 * d);
    std::memcpy(G.data(), gz, B * d * sizeof(S));
    mm(B, d, d, da + 3 * d, la, Wy, d, S(1), G.data(), d);                 // dL/dz' += dsy Wy
    for (i64 b = 0; b < B; ++b)  // z-update
      relax_bwd(d, h, a + b * la, a + b * la + d, zp + b * lzp, G.data() + b * d, gz + b * d, da + b * la,
                da + b * la + d);
    std::memcpy(gy, H.data(), B * d * sizeof(S));
    mm(B, d, 3 * d, da, la, Wg, d, S(1), gy, d);                          // dL/dy += [ds1 dsz ds2] [W1; Wz; W2]
  }
}

}  // namespace

// ---- exports: NAME(f64, sizes, pointers, scalars); see odelab/kernels/cpu/extension.py ----------------
#define PTR(i) ((S*)p[i])
#define ODELAB_EXPORT(name, body)                                                                         \
  template <typename S> void name##_impl(const i64* n, void* const* p, const double* s) { body; }        \
  extern "C" void name(int f64, const i64* n, void* const* p, const double* s) {                         \
    if (f64) name##_impl<double>(n, p, s); else name##_impl<float>(n, p, s);                             \
  }

extern "C" {
void odelab_math_f32(i64 n, const float* x, float* sig, float* th) {  // for the tests of the fast math
  for (i64 i = 0; i < n; ++i) { sig[i] = sigmoid(x[i]); th[i] = tanh_(x[i]); }
}
void odelab_set_blas_threshold(i64 t) { blas_threshold = t; }
int odelab_has_blas() { return (sgemm_ != nullptr && dgemm_ != nullptr) ? 1 : 0; }
}

// sizes (B, T, d); pointers A z0 y0 Wg^T Wy^T Z Y; scalars h
ODELAB_EXPORT(lem_forward, lem_fwd<S>(n[0], n[1], n[2], PTR(0), PTR(1), PTR(2), PTR(3), PTR(4), s[0], PTR(5), PTR(6)))
// sizes (B, T, d); pointers A z0 y0 Wg Wy Z Y dY gz gy dA; scalars h
ODELAB_EXPORT(lem_backward, lem_bwd<S>(n[0], n[1], n[2], PTR(0), PTR(1), PTR(2), PTR(3), PTR(4), s[0], PTR(5), PTR(6),
                                       PTR(7), PTR(8), PTR(9), PTR(10)))
"""
