"""The C++ source of every CPU kernel: ONE translation unit, compiled once per machine on first use.

Plain C++17 on raw pointers (no torch headers, no pybind11: it compiles in a few seconds and is called through
``ctypes``). Matrix products go to the BLAS inside ``libtorch_cpu`` (MKL's ``sgemm_`` / ``dgemm_``, declared
weak: a torch without them falls back to the plain loops below; small products run as plain loops), except in
float32 on a CPU with AVX-512, where every product runs as the register blocks written here (MKL runs its AVX2 code
on AMD CPUs).
The float32 gate nonlinearities are branch-free so that GCC vectorises the fused gate loops; float64 uses libm.

Every cell has a forward that runs the whole time loop, storing the states and, where the cell has matrix
products, writing the pre-activations into the buffer that held the input encoding (``V u + b``, computed for
all steps in one GEMM by torch): the memory the backward keeps is the states plus that buffer, as for a
backward that would recompute the products, and the backward needs no product recomputed. The backward (BPTT)
recomputes the gates elementwise from the stored pre-activations and states and writes the per-step
pre-activation gradients; weight gradients are then products over the steps read from the stored states in
place (``state_products``: one per sample, no shifted copy of the sequence) or, for diagonal and per-synapse
parameters, accumulated here in double. Without a backward to come, the Python side runs a forward over chunks
of steps, so the whole sequence's encoding is never allocated.

Layout: batch first, as odelab's sequences, ``(B, T, k)`` contiguous; one step is a ``(B, k)`` matrix with
row stride ``T k``. Each kernel is a template on the scalar type, exported as ``NAME(f64, sizes, pointers,
scalars)`` (see :func:`odelab.kernels.cpu.extension.call`).
"""

SOURCE = r"""
#include <algorithm>
#include <pthread.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

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
// Column-major C^T = B^T A: the row-major C (M x N, ldc) = beta C + A^T B for A (K x M, lda), B (K x N, ldb).
inline void blas_tn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                    int ldc) {
  const char nt = 'N', tt = 'T'; const float one = 1.0f;
  sgemm_(&nt, &tt, &n, &m, &k, &one, b, &ldb, a, &lda, &beta, c, &ldc);
}
inline void blas_tn(int m, int n, int k, const double* a, int lda, const double* b, int ldb, double beta, double* c,
                    int ldc) {
  const char nt = 'N', tt = 'T'; const double one = 1.0;
  dgemm_(&nt, &tt, &n, &m, &k, &one, b, &ldb, a, &lda, &beta, c, &ldc);
}
inline bool have_blas(float*) { return sgemm_ != nullptr; }
inline bool have_blas(double*) { return dgemm_ != nullptr; }

i64 blas_threshold = 32 * 32 * 32;  // M N K at or above which the BLAS is called

// float32 products on AVX-512 (compiled where -march=native has it): register blocks of C, 6 rows x up to 64
// columns (24 accumulators of 16 lanes), each k a broadcast of A's entry times B's row segment, the last 16-lane
// vector masked where N is not a multiple of 16. Column panels outer, row blocks inner, so that a panel of B (K x 64)
// stays in L1/L2 across the row blocks. MKL's sgemm_ takes its generic AVX2 path on non-Intel CPUs (about 100
// GFLOPS on one Zen 5 core at (128, 128) x (128, 384), where these blocks reach about 240, near the AVX-512 peak). AT:
// A is stored transposed (K x M, lda), the C += A^T B of a weight gradient summed over steps.
#if defined(__AVX512F__)
// Every float32 product goes to them, at every size (faster than the loops from hidden 4 up, the same at hidden 1:
// LEM at (32, 1000, 16) 13.5 -> 9.6 ms a training step, one thread); odelab_set_simd(0): as without AVX-512.
bool simd_products = true;

template <int MR, int NV, bool AT>
void simd_block(i64 K, const float* __restrict__ A, i64 lda, const float* __restrict__ B, i64 ldb, float beta,
                float* __restrict__ C, i64 ldc, __mmask16 last) {
  // every loop over r and q unrolled, so that c[][] lives in registers (GCC keeps an array indexed by a loop it does
  // not unroll in memory: a store after each multiply-add, at a third of the speed)
  __m512 c[MR][NV];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) c[r][q] = _mm512_setzero_ps();
  for (i64 k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m512 v[NV];
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q)
      v[q] = q == NV - 1 ? _mm512_maskz_loadu_ps(last, b + 16 * q) : _mm512_loadu_ps(b + 16 * q);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(AT ? A[k * lda + r] : A[r * lda + k]);
#pragma GCC unroll 4
      for (int q = 0; q < NV; ++q) c[r][q] = _mm512_fmadd_ps(a, v[q], c[r][q]);
    }
  }
  const __m512 scale = _mm512_set1_ps(beta);
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < NV; ++q) {
      float* o = C + r * ldc + 16 * q;
      const __mmask16 m = q == NV - 1 ? last : (__mmask16)0xFFFF;
      const __m512 x = beta == 0.0f ? c[r][q] : _mm512_fmadd_ps(scale, _mm512_maskz_loadu_ps(m, o), c[r][q]);
      _mm512_mask_storeu_ps(o, m, x);
    }
}

template <int MR, bool AT>
void simd_rows(int nv, i64 K, const float* A, i64 lda, const float* B, i64 ldb, float beta, float* C, i64 ldc,
               __mmask16 last) {
  switch (nv) {
    case 1: simd_block<MR, 1, AT>(K, A, lda, B, ldb, beta, C, ldc, last); break;
    case 2: simd_block<MR, 2, AT>(K, A, lda, B, ldb, beta, C, ldc, last); break;
    case 3: simd_block<MR, 3, AT>(K, A, lda, B, ldb, beta, C, ldc, last); break;
    default: simd_block<MR, 4, AT>(K, A, lda, B, ldb, beta, C, ldc, last);
  }
}

// Row-major C (M x N, ldc) = beta C + op(A) B, op(A) = A (M x K, lda) or with AT A^T (A: K x M, lda), in slices of
// SIMD_KC steps of k (a weight gradient's K is every step of the sequence: its B panel would not stay in cache);
// A^T B in slices of SIMD_KC_TN, whose B panel (64 rows of 64 columns, 16 KB) stays in L1 while the row blocks of C
// pass over it (a weight gradient's products over a sample's steps: 184 -> 215 GFLOPS at (384, 128, 999); the
// step products, A B, were fastest at 256).
constexpr i64 SIMD_KC = 256, SIMD_KC_TN = 64;

template <bool AT>
void simd_mm(i64 M, i64 N, i64 K, const float* A, i64 lda, const float* B, i64 ldb, float beta, float* C, i64 ldc) {
  constexpr i64 kc = AT ? SIMD_KC_TN : SIMD_KC;
  if (K > kc) {
    for (i64 k0 = 0; k0 < K; k0 += kc)
      simd_mm<AT>(M, N, std::min(kc, K - k0), AT ? A + k0 * lda : A + k0, lda, B + k0 * ldb, ldb,
                  k0 ? 1.0f : beta, C, ldc);
    return;
  }
  for (i64 j = 0; j < N; j += 64) {
    const i64 n = std::min<i64>(64, N - j);
    const int nv = (int)((n + 15) / 16);
    const __mmask16 last = n % 16 ? (__mmask16)((1u << (n % 16)) - 1) : (__mmask16)0xFFFF;
    for (i64 i = 0; i < M; i += 6) {
      const float* a = AT ? A + i : A + i * lda;
      float* c = C + i * ldc + j;
      switch (std::min<i64>(6, M - i)) {
        case 1: simd_rows<1, AT>(nv, K, a, lda, B + j, ldb, beta, c, ldc, last); break;
        case 2: simd_rows<2, AT>(nv, K, a, lda, B + j, ldb, beta, c, ldc, last); break;
        case 3: simd_rows<3, AT>(nv, K, a, lda, B + j, ldb, beta, c, ldc, last); break;
        case 4: simd_rows<4, AT>(nv, K, a, lda, B + j, ldb, beta, c, ldc, last); break;
        case 5: simd_rows<5, AT>(nv, K, a, lda, B + j, ldb, beta, c, ldc, last); break;
        default: simd_rows<6, AT>(nv, K, a, lda, B + j, ldb, beta, c, ldc, last);
      }
    }
  }
}
#endif

template <typename S>
void mm(i64 M, i64 N, i64 K, const S* A, i64 lda, const S* B, i64 ldb, S beta, S* C, i64 ldc) {
  if (M == 0 || N == 0) return;
#if defined(__AVX512F__)
  if constexpr (std::is_same<S, float>::value) {
    if (simd_products) { simd_mm<false>(M, N, K, A, lda, B, ldb, beta, C, ldc); return; }
  }
#endif
  if (K > 0 && M * N * K >= blas_threshold && have_blas((S*)nullptr) && lda < (1LL << 31) && ldb < (1LL << 31)
      && ldc < (1LL << 31)) {
    // row-major C = A B  <=>  column-major C^T = B^T A^T, and a row-major X (ld) is a column-major X^T (ld)
    blas((int)N, (int)M, (int)K, B, (int)ldb, A, (int)lda, beta, C, (int)ldc);
  } else {
    mm_loops(M, N, K, A, lda, B, ldb, beta, C, ldc);
  }
}

// ---- batch rows over threads ----------------------------------------------------------------------------
// Different samples' recurrences are independent, so a kernel can run as `threads` kernels on contiguous ranges of
// batch rows. Each range runs its rows exactly as the whole kernel would (a product block sums every element of C
// over k in the same order whatever rows lie beside it), so the results do not depend on the thread count. Only
// where the float32 products are the register blocks, one core each (MKL's, float64 or without AVX-512, thread
// themselves); at least ROWS_PER_THREAD rows a thread. odelab_set_threads: torch's thread count (extension.call).
int row_threads = 1;
constexpr i64 ROWS_PER_THREAD = 8;

// A process forked after an OpenMP region must not open another: GNU libgomp keeps the parent's thread pool, whose
// threads the child does not have, and waits for them forever. In a forked child the kernels run on one thread.
bool forked = false;
const int fork_guard = pthread_atfork(nullptr, nullptr, [] { forked = true; });
inline int usable_threads(int threads) { return forked ? 1 : threads; }

template <typename S, typename Body>
void over_rows(i64 B, Body body) {
  int t = 1;
#if defined(__AVX512F__) && defined(_OPENMP)
  if (std::is_same<S, float>::value && simd_products)
    t = (int)std::max<i64>(1, std::min<i64>(usable_threads(row_threads), B / ROWS_PER_THREAD));
#endif
  if (t <= 1) { body(i64(0), B); return; }
#pragma omp parallel for num_threads(t) schedule(static)
  for (int i = 0; i < t; ++i) body(B * i / t, B * (i + 1) / t - B * i / t);
}

// p + offset, or null for a null p (the optional arguments)
template <typename S>
inline S* at(S* p, i64 offset) { return p ? p + offset : nullptr; }

// Ask for the cache lines of p[0, n) ahead of their use (rows that the loops reach strided far apart).
template <typename S>
inline void prefetch(const S* p, i64 n) {
  for (i64 k = 0; k < n; k += 64 / sizeof(S)) __builtin_prefetch(p + k);
}

// Row-major C (M x N, ldc) += A^T B, A (K x M, lda), B (K x N, ldb): a weight gradient summed over K steps.
template <typename S>
void mm_tn(i64 M, i64 N, i64 K, const S* A, i64 lda, const S* B, i64 ldb, S* C, i64 ldc) {
  if (M == 0 || N == 0 || K == 0) return;
#if defined(__AVX512F__)
  if constexpr (std::is_same<S, float>::value) {
    if (simd_products) { simd_mm<true>(M, N, K, A, lda, B, ldb, 1.0f, C, ldc); return; }
  }
#endif
  if (M * N * K >= blas_threshold && have_blas((S*)nullptr) && lda < (1LL << 31) && ldb < (1LL << 31)
      && ldc < (1LL << 31) && K < (1LL << 31)) {
    blas_tn((int)M, (int)N, (int)K, A, (int)lda, B, (int)ldb, S(1), C, (int)ldc);
    return;
  }
  for (i64 k = 0; k < K; ++k)
    for (i64 i = 0; i < M; ++i) {
      const S a = A[k * lda + i];
      const S* __restrict__ b = B + k * ldb;
      S* __restrict__ c = C + i * ldc;
      for (i64 j = 0; j < N; ++j) c[j] += a * b[j];
    }
}

// The gradient of a weight W in the products W state_{n−s} of steps n = s … T−1 (state 0 = h0, state k >= 1 =
// H[:, k−1], zero before 0): O (nc x d) = Σ_b Σ_n dA[b, n, c0 : c0 + nc]^T state_{n−s}[b], dA (B, T, w). Per
// sample one product over its steps (their states are rows of H: no copy of the shifted sequence), and one over
// the batch for h0. With state dropout, F (B, T, 2, d) (null: none): the states as step n read them,
// F[b, n, f] ⊙ state_{n−s}, a sample at a time in R.
template <typename S>
void state_products(i64 B, i64 T, i64 w, i64 c0, i64 nc, i64 d, i64 s, const S* dA, const S* H, const S* h0,
                    S* O, const S* F, i64 f) {
  std::fill(O, O + nc * d, S(0));
  if (s >= T) return;
  if (F) {
    std::vector<S> R((T - s) * d);
    for (i64 b = 0; b < B; ++b) {
      for (i64 r = 0; r < T - s; ++r) {
        const S* __restrict__ x = r == 0 ? h0 + b * d : H + (b * T + r - 1) * d;
        const S* __restrict__ k = F + ((b * T + s + r) * 2 + f) * d;
        S* __restrict__ o = R.data() + r * d;
        for (i64 j = 0; j < d; ++j) o[j] = k[j] * x[j];
      }
      mm_tn(nc, d, T - s, dA + (b * T + s) * w + c0, w, R.data(), d, O, d);
    }
    return;
  }
  mm_tn(nc, d, B, dA + s * w + c0, T * w, h0, d, O, d);
  for (i64 b = 0; b < B; ++b)
    mm_tn(nc, d, T - 1 - s, dA + (b * T + s + 1) * w + c0, w, H + b * T * d, d, O, d);
}

// O (nc x d) = dA[:, c0 : c0 + nc]^T X over R rows, dA (R, w), X (R, d): a weight's gradient in products with a
// state of the same step (LEM's Wy z'_n).
template <typename S>
void column_products(i64 R, i64 w, i64 c0, i64 nc, i64 d, const S* dA, const S* X, S* O) {
  std::fill(O, O + nc * d, S(0));
  mm_tn(nc, d, R, dA + c0, w, X, d, O, d);
}

// ---- the affine input encoding A = X V^T + b of every (sub-)step, for inputs of a few channels ------------------
// (torch's addmm writes the bias and then adds a K = n product: two passes over the whole (R, w) sequence; its
// backward one product and one sum over it.) Here one pass each way. A (R x w), X (R x n), Vt = V^T (n x w), b (w)
// or null.
template <typename S>
void affine_fwd(i64 R, i64 n, i64 w, const S* X, const S* Vt, const S* b, S* A) {
  for (i64 r = 0; r < R; ++r) {
    S* __restrict__ a = A + r * w;
    const S* __restrict__ x = X + r * n;
    if (b) std::memcpy(a, b, w * sizeof(S)); else std::fill(a, a + w, S(0));
    for (i64 k = 0; k < n; ++k) {
      const S xk = x[k];
      const S* __restrict__ v = Vt + k * w;
      for (i64 j = 0; j < w; ++j) a[j] += xk * v[j];
    }
  }
}

// dVt (n x w) = X^T dA and db (w) = the sum of dA's rows (db may be null): partial sums over blocks of rows in S,
// their total in double (R is every step of every sample).
template <typename S>
void affine_bwd(i64 R, i64 n, i64 w, const S* dA, const S* X, S* dVt, S* db) {
  constexpr i64 RB = 256;
  std::vector<double> tv(n * w, 0.0), tb(w, 0.0);
  std::vector<S> pv(n * w), pb(w);
  for (i64 r0 = 0; r0 < R; r0 += RB) {
    std::fill(pv.begin(), pv.end(), S(0)); std::fill(pb.begin(), pb.end(), S(0));
    S* __restrict__ qv = pv.data();
    S* __restrict__ qb = pb.data();
    for (i64 r = r0; r < std::min(R, r0 + RB); ++r) {
      const S* __restrict__ a = dA + r * w;
      const S* __restrict__ x = X + r * n;
      if (db) for (i64 j = 0; j < w; ++j) qb[j] += a[j];
      for (i64 k = 0; k < n; ++k) {
        const S xk = x[k];
        for (i64 j = 0; j < w; ++j) qv[k * w + j] += xk * a[j];
      }
    }
    for (i64 i = 0; i < n * w; ++i) tv[i] += qv[i];
    if (db) for (i64 j = 0; j < w; ++j) tb[j] += qb[j];
  }
  for (i64 i = 0; i < n * w; ++i) dVt[i] = S(tv[i]);
  if (db) for (i64 j = 0; j < w; ++j) db[j] = S(tb[j]);
}

// ---- gate nonlinearities ------------------------------------------------------------------------------
// float: branch-free exp (Cephes expf: range reduction to |r| <= ln2/2, degree-7 polynomial, 2^k from the
// exponent bits) and tanh built on it, so that GCC vectorises the gate loops (std::exp/std::tanh are scalar
// libm calls and would dominate the step). About 1-2 ulp. double: std::exp / std::tanh.
// The argument is clamped to ±80, so a sigmoid never falls below e^{-80} = 1.8e-35 and neither it nor its products
// with a state are subnormal: GCC blends in the values at the clamps, precomputed and multiplied by each row's
// sub-step, and at the former −87 / 88 σ's was 6e-39, subnormal: STC's update took 85 ticks a row instead of 28
// (this CPU pays a microcode assist for subnormal operands).
inline float exp_fast(float x) {
  x = x < -80.0f ? -80.0f : (x > 80.0f ? 80.0f : x);
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
inline __attribute__((always_inline))
void relax_fwd(i64 d, S h, const S* __restrict__ s1, const S* __restrict__ sz, const S* __restrict__ z,
               S* __restrict__ out) {
  for (i64 j = 0; j < d; ++j) {
    const S g = sigmoid(s1[j]), t = tanh_(sz[j]);
    out[j] = z[j] + h * (g * t - g * z[j]);
  }
}
// g: in = dL/dz', out = dL/dz (through the explicit term); d1, dt: dL/ds1, dL/dsz
template <typename S>
inline __attribute__((always_inline))  // (GCC left relax_bwd out of line: a call per batch row)
void relax_bwd(i64 d, S h, const S* __restrict__ s1, const S* __restrict__ sz, const S* __restrict__ z,
               const S* __restrict__ gin, S* __restrict__ gout, S* __restrict__ d1, S* __restrict__ dt) {
  for (i64 j = 0; j < d; ++j) {
    const S g = sigmoid(s1[j]), t = tanh_(sz[j]), gj = gin[j];
    d1[j] = gj * h * (t - z[j]) * g * (S(1) - g);
    dt[j] = gj * h * g * (S(1) - t * t);
    gout[j] = gj - h * g * gj;
  }
}
// Σ_j gin_j ∂x'_j/∂h = Σ_j gin_j σ(s_j) (tanh(t_j) − x_j): the step length's gradient (gin = dL/dx')
template <typename S>
S relax_dh(i64 d, const S* __restrict__ s1, const S* __restrict__ sz, const S* __restrict__ z,
           const S* __restrict__ gin) {
  S acc = S(0);
  for (i64 j = 0; j < d; ++j) acc += gin[j] * sigmoid(s1[j]) * (tanh_(sz[j]) - z[j]);
  return acc;
}

// the step of batch row b at step n: its own (hs (B, T), irregular sampling) or the shared h
template <typename S>
inline __attribute__((always_inline)) S step(const S* __restrict__ hs, S h, i64 b, i64 T, i64 n) {
  return __builtin_expect(hs != nullptr, 0) ? hs[b * T + n] : h;
}

template <typename S>
void lem_fwd(i64 B, i64 T, i64 d, S* A, const S* z0, const S* y0, const S* Wgt, const S* Wyt, double hd, S* Z,
             S* Y, const S* hs) {  // hs (B, T): each sample's step (irregular sampling); nullptr: h for every one
  const S h = S(hd);
  const i64 ls = T * d, la = T * 4 * d;  // row strides of a step's states / pre-activations
  for (i64 n = 0; n < T; ++n) {
    const S* yp = n ? Y + (n - 1) * d : y0; const i64 lyp = n ? ls : d;
    const S* zp = n ? Z + (n - 1) * d : z0; const i64 lzp = n ? ls : d;
    S* a = A + n * 4 * d;
    mm(B, 3 * d, d, yp, lyp, Wgt, 3 * d, S(1), a, la);                    // [s1 s2 sz] += y [W1; Wz; W2]^T
    for (i64 b = 0; b < B; ++b) {
      relax_fwd(d, step(hs, h, b, T, n), a + b * la, a + b * la + d, zp + b * lzp, Z + n * d + b * ls);
      if (n + 1 < T) prefetch(a + 4 * d + b * la, 4 * d);  // the next step's row: rows lie a sequence apart
    }
    mm(B, d, d, Z + n * d, ls, Wyt, d, S(1), a + 3 * d, la);               // sy += z' Wy^T
    for (i64 b = 0; b < B; ++b)                                            // same form
      relax_fwd(d, step(hs, h, b, T, n), a + b * la + 2 * d, a + b * la + 3 * d, yp + b * lyp, Y + n * d + b * ls);
  }
}

// dY: gradient of the outputs (nullptr = zero); gz, gy: in = gradients of the final state, out = of the
// initial state. dA (B,T,4d): gradients of the pre-activations (= of the encoded input). G: (B, d) scratch.
// dhs (B, T) or null: the gradients of the steps' lengths hs.
template <typename S>
void lem_bwd(i64 B, i64 T, i64 d, const S* A, const S* z0, const S* y0, const S* Wg, const S* Wy, double hd,
             const S* Z, const S* Y, const S* dY, S* gz, S* gy, S* dA, const S* hs, S* dhs) {
  const S h = S(hd);
  std::vector<S> G(B * d), H(B * d);
  const i64 ls = T * d, la = T * 4 * d;
  for (i64 n = T - 1; n >= 0; --n) {
    const S* yp = n ? Y + (n - 1) * d : y0; const i64 lyp = n ? ls : d;
    const S* zp = n ? Z + (n - 1) * d : z0; const i64 lzp = n ? ls : d;
    const S* a = A + n * 4 * d; S* da = dA + n * 4 * d;
    if (dY) for (i64 b = 0; b < B; ++b) for (i64 j = 0; j < d; ++j) gy[b * d + j] += dY[b * ls + n * d + j];
    for (i64 b = 0; b < B; ++b) {  // y-update
      relax_bwd(d, step(hs, h, b, T, n), a + b * la + 2 * d, a + b * la + 3 * d, yp + b * lyp, gy + b * d, H.data() + b * d,
                da + b * la + 2 * d, da + b * la + 3 * d);
      if (n > 0) {  // the previous step's rows (a sequence apart): pre-activations, their gradients, dY, states
        prefetch(a - 4 * d + b * la, 4 * d); prefetch(da - 4 * d + b * la, 4 * d);
        if (dY) prefetch(dY + b * ls + (n - 1) * d, d);
        if (n > 1) { prefetch(Y + (n - 2) * d + b * ls, d); prefetch(Z + (n - 2) * d + b * ls, d); }
      }
    }
    std::memcpy(G.data(), gz, B * d * sizeof(S));
    mm(B, d, d, da + 3 * d, la, Wy, d, S(1), G.data(), d);                 // dL/dz' += dsy Wy
    for (i64 b = 0; b < B; ++b)  // z-update
      relax_bwd(d, step(hs, h, b, T, n), a + b * la, a + b * la + d, zp + b * lzp, G.data() + b * d, gz + b * d, da + b * la,
                da + b * la + d);
    if (dhs)  // both updates' (gy = dL/dy', G = dL/dz' still)
      for (i64 b = 0; b < B; ++b)
        dhs[b * T + n] = relax_dh(d, a + b * la + 2 * d, a + b * la + 3 * d, yp + b * lyp, gy + b * d)
                         + relax_dh(d, a + b * la, a + b * la + d, zp + b * lzp, G.data() + b * d);
    std::memcpy(gy, H.data(), B * d * sizeof(S));
    mm(B, d, 3 * d, da, la, Wg, d, S(1), gy, d);                          // dL/dy += [ds1 dsz ds2] [W1; Wz; W2]
  }
}

// g (B x d) += dY[:, n] (row stride ls); dY may be null
template <typename S>
void add_step(i64 B, i64 d, S* g, const S* dY, i64 n, i64 ls) {
  if (!dY) return;
  for (i64 b = 0; b < B; ++b) {
    S* __restrict__ gb = g + b * d; const S* __restrict__ db = dY + b * ls + n * d;
    for (i64 j = 0; j < d; ++j) gb[j] += db[j];
  }
}

// =====================================================================================================
// coRNN (002 eq. 2.3), z first then y = y + h z_new; damping explicit ("imex") or implicit ("imex-implicit").
//   A (B·T, d): on entry a = V u + b, on exit s = 𝒲 z + W y + a (in place). Wct = 𝒲^T, Wyt = W^T.
//   F = tanh(s) − γ y;  explicit z' = z + h (F − ε z);  implicit z' = (z + h F) / (1 + h ε);  y' = y + h z'
// =====================================================================================================
template <typename S>
void cornn_step(i64 d, S h, S gamma, S eps, S den, int implicit, const S* __restrict__ s, const S* __restrict__ z,
                const S* __restrict__ y, S* __restrict__ zo, S* __restrict__ yo) {
  if (implicit) for (i64 j = 0; j < d; ++j) {
    const S f = tanh_(s[j]) - gamma * y[j];
    const S zn = (z[j] + h * f) / den;
    zo[j] = zn; yo[j] = y[j] + h * zn;
  } else for (i64 j = 0; j < d; ++j) {
    const S f = tanh_(s[j]) - gamma * y[j];
    const S zn = z[j] + h * (f - eps * z[j]);
    zo[j] = zn; yo[j] = y[j] + h * zn;
  }
}
template <typename S>
void cornn_step_bwd(i64 d, S h, S gamma, S q, S keep, const S* __restrict__ s, S* __restrict__ ds,
                    S* __restrict__ Gy, S* __restrict__ Gz) {
  for (i64 j = 0; j < d; ++j) {
    const S t = tanh_(s[j]);
    const S gyj = Gy[j];
    const S gzt = Gz[j] + h * gyj;                               // y' = y + h z'
    ds[j] = gzt * q * (S(1) - t * t);
    Gy[j] = gyj - gzt * q * gamma;
    Gz[j] = gzt * keep;
  }
}

template <typename S>
void cornn_fwd(i64 B, i64 T, i64 d, S* A, const S* z0, const S* y0, const S* Wct, const S* Wyt, double hd,
               double gd, double ed, int implicit, S* Z, S* Y, const S* hs) {  // hs (B, T): per-sample steps, or null
  const S h = S(hd), gamma = S(gd), eps = S(ed);
  const S den = S(1) + h * eps;
  const i64 ls = T * d;
  for (i64 n = 0; n < T; ++n) {
    const S* yp = n ? Y + (n - 1) * d : y0; const S* zp = n ? Z + (n - 1) * d : z0; const i64 lp = n ? ls : d;
    S* a = A + n * d;
    mm(B, d, d, zp, lp, Wct, d, S(1), a, ls);
    mm(B, d, d, yp, lp, Wyt, d, S(1), a, ls);
    for (i64 b = 0; b < B; ++b) {
      const S hb = step(hs, h, b, T, n);
      cornn_step(d, hb, gamma, eps, hs ? S(1) + hb * eps : den, implicit, a + b * ls, zp + b * lp, yp + b * lp,
                 Z + n * d + b * ls, Y + n * d + b * ls);
    }
  }
}

// Σ_j (Gy_j ∂y'_j/∂h + Gz_j ∂z'_j/∂h) at y' = y + h z': the step length's gradient, from dL/dy' = Gy, dL/dz' = Gz
// (before cornn_step_bwd), the step's s, its start (z, y) and its z' (zn); ∂z'/∂h = F − ε z (explicit) or
// (F − ε z') / (1 + h ε) (implicit).
template <typename S>
S cornn_dh(i64 d, S h, S gamma, S eps, int implicit, const S* __restrict__ s, const S* __restrict__ z,
           const S* __restrict__ y, const S* __restrict__ zn, const S* __restrict__ Gy, const S* __restrict__ Gz) {
  S acc = S(0);
  for (i64 j = 0; j < d; ++j) {
    const S f = tanh_(s[j]) - gamma * y[j];
    const S dz = implicit ? (f - eps * zn[j]) / (S(1) + h * eps) : f - eps * z[j];
    acc += Gy[j] * zn[j] + (Gz[j] + h * Gy[j]) * dz;
  }
  return acc;
}

// z0 y0 Z Y (the states) are read only for dhs (B, T; null: not wanted), the gradients of the steps' lengths.
template <typename S>
void cornn_bwd(i64 B, i64 T, i64 d, const S* A, const S* Wc, const S* Wy, double hd, double gd, double ed,
               int implicit, const S* dY, S* gz, S* gy, S* dA, const S* hs, const S* z0, const S* y0, const S* Z,
               const S* Y, S* dhs) {
  const S h = S(hd), gamma = S(gd), eps = S(ed);
  const S den = S(1) + h * eps;
  const S q = implicit ? h / den : h;                       // dz'/dF
  const S keep = implicit ? S(1) / den : S(1) - h * eps;    // dz'/dz
  const i64 ls = T * d;
  for (i64 n = T - 1; n >= 0; --n) {
    add_step(B, d, gy, dY, n, ls);
    for (i64 b = 0; b < B; ++b) {
      if (hs) {
        const S hb = hs[b * T + n], db = S(1) + hb * eps;
        if (dhs) {
          const S* zp = n ? Z + (n - 1) * d + b * ls : z0 + b * d; const S* yp = n ? Y + (n - 1) * d + b * ls : y0 + b * d;
          dhs[b * T + n] = cornn_dh(d, hb, gamma, eps, implicit, A + n * d + b * ls, zp, yp, Z + n * d + b * ls,
                                    gy + b * d, gz + b * d);
        }
        cornn_step_bwd(d, hb, gamma, implicit ? hb / db : hb, implicit ? S(1) / db : S(1) - hb * eps,
                       A + n * d + b * ls, dA + n * d + b * ls, gy + b * d, gz + b * d);
      } else {
        cornn_step_bwd(d, h, gamma, q, keep, A + n * d + b * ls, dA + n * d + b * ls, gy + b * d, gz + b * d);
      }
    }
    mm(B, d, d, dA + n * d, ls, Wc, d, S(1), gz, d);          // dL/dz += ds 𝒲
    mm(B, d, d, dA + n * d, ls, Wy, d, S(1), gy, d);          // dL/dy += ds W
  }
}

// =====================================================================================================
// UnICORNN layer (002 eq. 3.6), symplectic Euler with the per-neuron step h σ̂(c) -- diagonal, no products.
//   a = V u + b (B·T, d), k = σ̂(c), s = w y + a:  z' = z + h (−k (tanh(s) + α y)),  y' = y + h (k z')
// =====================================================================================================
template <typename S>
void unicornn_step(i64 d, S h, S alpha, const S* __restrict__ a, const S* __restrict__ zp, const S* __restrict__ yp,
                   const S* __restrict__ w, const S* __restrict__ k, S* __restrict__ zo, S* __restrict__ yo) {
  for (i64 j = 0; j < d; ++j) {
    const S zn = zp[j] + h * (-k[j] * (tanh_(w[j] * yp[j] + a[j]) + alpha * yp[j]));
    zo[j] = zn; yo[j] = yp[j] + h * (k[j] * zn);
  }
}
template <typename S>
void unicornn_step_bwd(i64 d, S h, S alpha, const S* __restrict__ a, const S* __restrict__ yp,
                       const S* __restrict__ zn, const S* __restrict__ w, const S* __restrict__ k,
                       S* __restrict__ Gy, S* __restrict__ Gz, S* __restrict__ ds, S* __restrict__ accw,
                       S* __restrict__ acck) {
  for (i64 j = 0; j < d; ++j) {
    const S t = tanh_(w[j] * yp[j] + a[j]);
    const S gyj = Gy[j];
    const S gzt = Gz[j] + gyj * h * k[j];                     // y' = y + h k z'
    const S force = t + alpha * yp[j];
    const S gf = -(gzt * h * k[j]);                           // dL/d(tanh(s) + α y)
    const S dsj = gf * (S(1) - t * t);
    acck[j] += gyj * h * zn[j] - gzt * h * force;
    accw[j] += dsj * yp[j];
    ds[j] = dsj;
    Gy[j] = gyj + gf * alpha + dsj * w[j];
    Gz[j] = gzt;
  }
}

template <typename S>
void unicornn_fwd(i64 B, i64 T, i64 d, const S* A, const S* z0, const S* y0, const S* w, const S* k, double hd,
                  double al, S* Z, S* Y) {
  const S h = S(hd), alpha = S(al);
  const i64 ls = T * d;
  for (i64 b = 0; b < B; ++b)
    for (i64 n = 0; n < T; ++n)
      unicornn_step(d, h, alpha, A + b * ls + n * d, n ? Z + b * ls + (n - 1) * d : z0 + b * d,
                    n ? Y + b * ls + (n - 1) * d : y0 + b * d, w, k, Z + b * ls + n * d, Y + b * ls + n * d);
}

// The sample and step loops of both UnICORNN backward passes: per sample b, n = T−1..0, dY_n added to Gy, then
// step(b, n, Gy, Gz, accw, acck); dw, dk: (d) outputs, the per-step w and k terms summed per sample in S (the
// samples split between threads, over_rows) and then across samples in double, in their order.
template <typename S, typename Step>
void unicornn_bwd_loop(i64 B, i64 T, i64 d, const S* dY, S* gz, S* gy, S* dw, S* dk, Step step) {
  const i64 ls = T * d;
  std::vector<S> pw(B * d, S(0)), pk(B * d, S(0));  // each sample's sums
  over_rows<S>(B, [&](i64 b0, i64 rows) {
    for (i64 b = b0; b < b0 + rows; ++b) {
      S* Gy = gy + b * d; S* Gz = gz + b * d;
      for (i64 n = T - 1; n >= 0; --n) {
        if (dY) for (i64 j = 0; j < d; ++j) Gy[j] += dY[b * ls + n * d + j];
        step(b, n, Gy, Gz, pw.data() + b * d, pk.data() + b * d);
      }
    }
  });
  std::vector<double> sw(d, 0.0), sk(d, 0.0);
  for (i64 b = 0; b < B; ++b)
    for (i64 j = 0; j < d; ++j) { sw[j] += double(pw[b * d + j]); sk[j] += double(pk[b * d + j]); }
  for (i64 j = 0; j < d; ++j) { dw[j] = S(sw[j]); dk[j] = S(sk[j]); }
}

template <typename S>
void unicornn_bwd(i64 B, i64 T, i64 d, const S* A, const S* y0, const S* w, const S* k, double hd, double al,
                  const S* Z, const S* Y, const S* dY, S* gz, S* gy, S* dA, S* dw, S* dk) {
  const S h = S(hd), alpha = S(al);
  const i64 ls = T * d;
  unicornn_bwd_loop(B, T, d, dY, gz, gy, dw, dk, [&](i64 b, i64 n, S* Gy, S* Gz, S* accw, S* acck) {
    unicornn_step_bwd(d, h, alpha, A + b * ls + n * d, n ? Y + b * ls + (n - 1) * d : y0 + b * d,
                      Z + b * ls + n * d, w, k, Gy, Gz, dA + b * ls + n * d, accw, acck);
  });
}

// Reversible variant (002 eq. 3.7): the forward stores only the outputs y_n and the final (z_T, y_T); the
// backward walks n = T..1 rebuilding (y_{n−1}, z_{n−1}) from (y_n, z_n) with the exact inverse step
//   y_{n−1} = y_n − h k z_n,   z_{n−1} = z_n + h k (tanh(w y_{n−1} + a_n) + α y_{n−1})
// and runs the adjoint recursion of unicornn_step_bwd alongside.
// No FMA contraction here: y_n − p undoes y_{n−1} + p exactly far more often when p is the same rounded
// product on both sides (with contraction the inverse drifts ~10x more in float32).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
template <typename S>
void unicornn_rev_step_bwd(i64 d, S h, S alpha, S* __restrict__ a, S* __restrict__ z, S* __restrict__ y,
                           const S* __restrict__ w, const S* __restrict__ k, S* __restrict__ Gy,
                           S* __restrict__ Gz, S* __restrict__ accw, S* __restrict__ acck) {
  for (i64 j = 0; j < d; ++j) {
    const S yp = y[j] - h * (k[j] * z[j]);                    // (3.7, y)
    const S t = tanh_(w[j] * yp + a[j]);
    const S force = t + alpha * yp;
    const S gyj = Gy[j];
    const S gzt = Gz[j] + gyj * h * k[j];                     // y' = y + h k z'
    const S gf = -(gzt * h * k[j]);                           // dL/d(tanh(s) + α y)
    const S dsj = gf * (S(1) - t * t);
    acck[j] += gyj * h * z[j] - gzt * h * force;
    accw[j] += dsj * yp;
    a[j] = dsj;                                               // the pre-activation gradient replaces a_n
    Gy[j] = gyj + gf * alpha + dsj * w[j];
    Gz[j] = gzt;
    z[j] = z[j] + h * (k[j] * force);                         // (3.7, z)
    y[j] = yp;
  }
}

// z, y (B, d): the initial state on entry, the final state on exit; Y (B, T, d) the outputs y_1..y_T.
template <typename S>
void unicornn_rev_fwd(i64 B, i64 T, i64 d, const S* A, const S* w, const S* k, double hd, double al, S* z, S* y,
                      S* Y) {
  const S h = S(hd), alpha = S(al);
  const i64 ls = T * d;
  for (i64 b = 0; b < B; ++b) {
    S* __restrict__ zb = z + b * d;
    for (i64 n = 0; n < T; ++n) {
      const S* __restrict__ a = A + b * ls + n * d;
      const S* __restrict__ yp = n ? Y + b * ls + (n - 1) * d : y + b * d;
      S* __restrict__ yo = Y + b * ls + n * d;
      for (i64 j = 0; j < d; ++j) {
        zb[j] = zb[j] + h * (-k[j] * (tanh_(w[j] * yp[j] + a[j]) + alpha * yp[j]));  // (3.6, z)
        yo[j] = yp[j] + h * (k[j] * zb[j]);                                            // (3.6, y)
      }
    }
    if (T) std::memcpy(y + b * d, Y + b * ls + (T - 1) * d, d * sizeof(S));
  }
}

// A (B·T, d): a = V u + b on entry, dL/da on exit; z, y: the final state on entry, the rebuilt initial state on
// exit; gz, gy: dL/d(z_T, y_T) on entry, dL/d(z_0, y_0) on exit; dw, dk as in unicornn_bwd.
template <typename S>
void unicornn_rev_bwd(i64 B, i64 T, i64 d, S* A, const S* w, const S* k, double hd, double al, S* z, S* y,
                      const S* dY, S* gz, S* gy, S* dw, S* dk) {
  const S h = S(hd), alpha = S(al);
  const i64 ls = T * d;
  unicornn_bwd_loop(B, T, d, dY, gz, gy, dw, dk, [&](i64 b, i64 n, S* Gy, S* Gz, S* accw, S* acck) {
    unicornn_rev_step_bwd(d, h, alpha, A + b * ls + n * d, z + b * d, y + b * d, w, k, Gy, Gz, accw, acck);
  });
}
#pragma GCC pop_options

// =====================================================================================================
// GRU-ODE (004 eq. 54) + Euler, torch's reset-after convention:
//   A (B·T, 3d) = [a_r | a_f | a_u] on entry; on exit [s_r | s_f | s_u] with s_r = W_r h + a_r,
//   s_f = W_f h + a_f, s_u = a_u + σ(s_r) ⊙ c, c = W_u h + b_hu (stored in C (B·T, d)).
//   h' = h + Δ (σ(s_f) tanh(s_u) − σ(s_f) h)
// =====================================================================================================
template <typename S>
void gru_fwd(i64 B, i64 T, i64 d, S* A, S* C, const S* h0, const S* Wrft, const S* Wut, const S* bhu, double hd,
             S* H, const S* hs) {  // hs (B, T): per-sample steps, or null
  const S h = S(hd);
  const i64 ls = T * d, la = T * 3 * d;
  for (i64 n = 0; n < T; ++n) {
    const S* hp = n ? H + (n - 1) * d : h0; const i64 lp = n ? ls : d;
    S* a = A + n * 3 * d; S* c = C + n * d;
    mm(B, 2 * d, d, hp, lp, Wrft, 2 * d, S(1), a, la);
    mm(B, d, d, hp, lp, Wut, d, S(0), c, ls);
    for (i64 b = 0; b < B; ++b) {
      S* __restrict__ s = a + b * la; S* __restrict__ cb = c + b * ls; const S* __restrict__ bias = bhu;
      for (i64 j = 0; j < d; ++j) {
        const S cj = cb[j] + bias[j];
        cb[j] = cj;
        s[2 * d + j] = s[2 * d + j] + sigmoid(s[j]) * cj;
      }
      relax_fwd(d, step(hs, h, b, T, n), s + d, s + 2 * d, hp + b * lp, H + n * d + b * ls);
    }
  }
}

template <typename S>
void gru_bwd(i64 B, i64 T, i64 d, const S* A, const S* C, const S* h0, const S* Wrf, const S* Wu, double hd,
             const S* H, const S* dY, S* gh, S* dA, S* dC, const S* hs, S* dhs) {  // dhs (B, T) or null: as lem_bwd
  const S h = S(hd);
  std::vector<S> G(B * d);
  const i64 ls = T * d, la = T * 3 * d;
  for (i64 n = T - 1; n >= 0; --n) {
    const S* hp = n ? H + (n - 1) * d : h0; const i64 lp = n ? ls : d;
    const S* a = A + n * 3 * d; S* da = dA + n * 3 * d;
    if (dY) for (i64 b = 0; b < B; ++b) for (i64 j = 0; j < d; ++j) gh[b * d + j] += dY[b * ls + n * d + j];
    for (i64 b = 0; b < B; ++b) {
      relax_bwd(d, step(hs, h, b, T, n), a + b * la + d, a + b * la + 2 * d, hp + b * lp, gh + b * d, G.data() + b * d,
                da + b * la + d, da + b * la + 2 * d);
      if (dhs) dhs[b * T + n] = relax_dh(d, a + b * la + d, a + b * la + 2 * d, hp + b * lp, gh + b * d);
      const S* __restrict__ s = a + b * la; const S* __restrict__ c = C + n * d + b * ls;
      S* __restrict__ dsr = da + b * la; const S* __restrict__ dsu = da + b * la + 2 * d;
      S* __restrict__ dc = dC + n * d + b * ls;
      for (i64 j = 0; j < d; ++j) {
        const S r = sigmoid(s[j]);
        dc[j] = dsu[j] * r;
        dsr[j] = dsu[j] * c[j] * r * (S(1) - r);
      }
    }
    std::memcpy(gh, G.data(), B * d * sizeof(S));
    mm(B, d, 2 * d, da, la, Wrf, d, S(1), gh, d);             // dL/dh += [ds_r ds_f] [W_r; W_f]
    mm(B, d, d, dC + n * d, ls, Wu, d, S(1), gh, d);          // dL/dh += dc W_u
  }
}

// =====================================================================================================
// Neural oscillator (002 eq. 4.1) + symplectic Euler:  s = W y + a (in place in A (B·T, d)),
//   z' = z + h tanh(s),  y' = y + h z'
// =====================================================================================================
template <typename S>
void osc_step(i64 d, S h, const S* __restrict__ s, const S* __restrict__ z, const S* __restrict__ y,
              S* __restrict__ zo, S* __restrict__ yo) {
  for (i64 j = 0; j < d; ++j) { const S zn = z[j] + h * tanh_(s[j]); zo[j] = zn; yo[j] = y[j] + h * zn; }
}
template <typename S>
void osc_step_bwd(i64 d, S h, const S* __restrict__ s, S* __restrict__ ds, const S* __restrict__ Gy,
                  S* __restrict__ Gz) {
  for (i64 j = 0; j < d; ++j) {
    const S t = tanh_(s[j]);
    const S gzt = Gz[j] + h * Gy[j];
    ds[j] = gzt * h * (S(1) - t * t);
    Gz[j] = gzt;
  }
}

template <typename S>
void osc_fwd(i64 B, i64 T, i64 d, S* A, const S* z0, const S* y0, const S* Wt, double hd, S* Z, S* Y,
             const S* hs) {  // hs (B, T): per-sample steps, or null
  const S h = S(hd);
  const i64 ls = T * d;
  for (i64 n = 0; n < T; ++n) {
    const S* yp = n ? Y + (n - 1) * d : y0; const S* zp = n ? Z + (n - 1) * d : z0; const i64 lp = n ? ls : d;
    S* a = A + n * d;
    mm(B, d, d, yp, lp, Wt, d, S(1), a, ls);
    for (i64 b = 0; b < B; ++b)
      osc_step(d, step(hs, h, b, T, n), a + b * ls, zp + b * lp, yp + b * lp, Z + n * d + b * ls, Y + n * d + b * ls);
  }
}

// hs (B, T): per-sample steps, or null; dhs (B, T) or null: the gradients of their lengths (Z: the z', read then)
template <typename S>
void osc_bwd(i64 B, i64 T, i64 d, const S* A, const S* W, double hd, const S* dY, S* gz, S* gy, S* dA,
             const S* hs, const S* Z, S* dhs) {
  const S h = S(hd);
  const i64 ls = T * d;
  for (i64 n = T - 1; n >= 0; --n) {
    add_step(B, d, gy, dY, n, ls);
    if (dhs)  // Σ_j Gy_j z'_j + (Gz_j + h Gy_j) tanh(s_j)
      for (i64 b = 0; b < B; ++b) {
        const S hb = hs[b * T + n], *s = A + n * d + b * ls, *zn = Z + n * d + b * ls, *Gy = gy + b * d, *Gz = gz + b * d;
        S acc = S(0);
        for (i64 j = 0; j < d; ++j) acc += Gy[j] * zn[j] + (Gz[j] + hb * Gy[j]) * tanh_(s[j]);
        dhs[b * T + n] = acc;
      }
    for (i64 b = 0; b < B; ++b)
      osc_step_bwd(d, step(hs, h, b, T, n), A + n * d + b * ls, dA + n * d + b * ls, gy + b * d, gz + b * d);
    mm(B, d, d, dA + n * d, ls, W, d, S(1), gy, d);
  }
}

// =====================================================================================================
// Gated delay cells (Erichson et al., eqs. 12, 14) + Euler, delayed state h_{n−m} from the stored states
// (zero history; m = 0 reads the current state). State k: k = 0 is h0, k >= 1 is H[:, k−1].
//   Delay GRU (kind 0): A = [a_c | a_g] -> s_c = W1 h + W2 h_{n−m} + a_c, s_g = W3 h + a_g;
//       h' = h + Δ (σ(s_g) tanh(s_c) − σ(s_g) h)
//   τ-GRU (kind 1):    A = [a_u | a_z | a_g | a_a] -> s_u = W1 h + a_u, s_z = W2 h_{n−m} + a_z, s_g = W3 h + a_g,
//       s_a = W4 h + a_a;  target = β tanh(s_u) + α σ(s_a) tanh(s_z);  h' = h + Δ (σ(s_g) target − σ(s_g) h)
//   Wht = weight_h^T (d x kd: [W1; W3] or [W1; W3; W4]), W2t = W2^T.
// =====================================================================================================
// The backward's ring of pending delayed gradients: state k's arrives at step k + m and is read at step k − 1,
// so m + 2 slots (no more than the T + 1 states) hold every one that is still to be read.
inline i64 pending_slots(i64 T, i64 m) { return std::min(m + 2, T + 1); }

template <typename S>
inline const S* delay_state(const S* H, const S* h0, i64 k, i64 d, i64 ls, i64* ld) {
  if (k < 0) return nullptr;
  if (k == 0) { *ld = d; return h0; }
  *ld = ls; return H + (k - 1) * d;
}

template <typename S>
void tau_step(i64 d, S h, S alpha, S beta, const S* __restrict__ sb, const S* __restrict__ x, S* __restrict__ o) {
  for (i64 j = 0; j < d; ++j) {
    const S u = tanh_(sb[j]), z = tanh_(sb[d + j]), g = sigmoid(sb[2 * d + j]), wa = sigmoid(sb[3 * d + j]);
    const S target = beta * u + alpha * (wa * z);
    o[j] = x[j] + h * (g * target - g * x[j]);
  }
}
template <typename S>
void tau_step_bwd(i64 d, S h, S alpha, S beta, const S* __restrict__ sb, const S* __restrict__ x,
                  S* __restrict__ ds, S* __restrict__ g) {
  for (i64 j = 0; j < d; ++j) {
    const S u = tanh_(sb[j]), z = tanh_(sb[d + j]), gg = sigmoid(sb[2 * d + j]), wa = sigmoid(sb[3 * d + j]);
    const S target = beta * u + alpha * (wa * z);
    const S G0 = g[j];
    const S dt = G0 * h * gg;                                         // dL/dtarget
    ds[j] = dt * beta * (S(1) - u * u);
    ds[d + j] = dt * alpha * wa * (S(1) - z * z);
    ds[2 * d + j] = G0 * h * (target - x[j]) * gg * (S(1) - gg);
    ds[3 * d + j] = dt * alpha * z * wa * (S(1) - wa);
    g[j] = G0 - h * gg * G0;
  }
}

// State dropout: K (B, T, 2, d) or null, the factors of step n: state n (the one it starts from) times K[:, n, 0],
// the delayed state it reads times K[:, n, 1]. dropped() writes them into R (2 x B x d) and points hp, hq there.
template <typename S>
void dropped(i64 B, i64 T, i64 d, i64 n, const S* K, S* R, const S** hp, i64* lp, const S** hq, i64* lq) {
  const i64 lk = T * 2 * d;
  for (i64 b = 0; b < B; ++b) {
    const S* __restrict__ k = K + b * lk + n * 2 * d; const S* __restrict__ x = *hp + b * *lp;
    S* __restrict__ r = R + b * d;
    for (i64 j = 0; j < d; ++j) r[j] = k[j] * x[j];
    if (*hq) {
      const S* __restrict__ q = *hq + b * *lq; S* __restrict__ rq = R + (B + b) * d;
      for (i64 j = 0; j < d; ++j) rq[j] = k[d + j] * q[j];
    }
  }
  *hp = R; *lp = d;
  if (*hq) { *hq = R + B * d; *lq = d; }
}

// τ-GRU with branches switched off (kind 2, §5's ablations: alpha = 0 drops z, a and W2; beta = 0 drops u;
// weighting = False drops a; gating = False drops g): e = the encoding block of (u, z, g, a) in A, w = the
// weight_h block of (u, −, g, a), −1 where absent (u, z absent: 0; g, a absent: 1); ne blocks a step, nh in weight_h.
struct TauLayout { i64 ne, nh, e[4], w[4]; };
// the values of a step's pre-activations: 2d (Delay GRU), 4d (τ-GRU), ne d (the ablations)
inline i64 gate_width(int kind, i64 d, const TauLayout& L) { return kind == 2 ? L.ne * d : kind ? 4 * d : 2 * d; }

template <typename S>
void tau_ablated_step(i64 d, S h, S alpha, S beta, const TauLayout& L, const S* __restrict__ sb,
                      const S* __restrict__ x, S* __restrict__ o) {
  for (i64 j = 0; j < d; ++j) {
    const S u = L.e[0] >= 0 ? tanh_(sb[L.e[0] * d + j]) : S(0), z = L.e[1] >= 0 ? tanh_(sb[L.e[1] * d + j]) : S(0);
    const S g = L.e[2] >= 0 ? sigmoid(sb[L.e[2] * d + j]) : S(1);
    const S wa = L.e[3] >= 0 ? sigmoid(sb[L.e[3] * d + j]) : S(1);
    const S target = beta * u + alpha * (wa * z);
    o[j] = x[j] + h * (g * target - g * x[j]);
  }
}
template <typename S>
void tau_ablated_step_bwd(i64 d, S h, S alpha, S beta, const TauLayout& L, const S* __restrict__ sb,
                          const S* __restrict__ x, S* __restrict__ ds, S* __restrict__ g) {
  for (i64 j = 0; j < d; ++j) {
    const S u = L.e[0] >= 0 ? tanh_(sb[L.e[0] * d + j]) : S(0), z = L.e[1] >= 0 ? tanh_(sb[L.e[1] * d + j]) : S(0);
    const S gg = L.e[2] >= 0 ? sigmoid(sb[L.e[2] * d + j]) : S(1);
    const S wa = L.e[3] >= 0 ? sigmoid(sb[L.e[3] * d + j]) : S(1);
    const S target = beta * u + alpha * (wa * z);
    const S G0 = g[j], dt = G0 * h * gg;                               // dt = dL/dtarget
    if (L.e[0] >= 0) ds[L.e[0] * d + j] = dt * beta * (S(1) - u * u);
    if (L.e[1] >= 0) ds[L.e[1] * d + j] = dt * alpha * wa * (S(1) - z * z);
    if (L.e[2] >= 0) ds[L.e[2] * d + j] = G0 * h * (target - x[j]) * gg * (S(1) - gg);
    if (L.e[3] >= 0) ds[L.e[3] * d + j] = dt * alpha * z * wa * (S(1) - wa);
    g[j] = G0 - h * gg * G0;
  }
}

// Steps n0 … n0 + TA − 1 of the T (A holds their TA encodings: the whole sequence, or a chunk of it when no
// backward follows); H (B, T, d) holds the states before n0; K as dropped() (steps indexed from 0, not n0).
template <typename S>
void gdelay_fwd(int kind, i64 B, i64 T, i64 d, i64 m, i64 n0, i64 TA, S* A, const S* h0, const S* Wht, const S* W2t,
                double hd, double al, double be, S* H, const S* K, const TauLayout& L) {
  const S h = S(hd), alpha = S(al), beta = S(be);
  const i64 ls = T * d, w = gate_width(kind, d, L), la = TA * w;
  std::vector<S> R(K ? 2 * B * d : 0);
  for (i64 n = n0; n < n0 + TA; ++n) {
    i64 lp = d, lq = d;
    const S* hp = delay_state(H, h0, n, d, ls, &lp);
    const S* hq = delay_state(H, h0, n - m, d, ls, &lq);
    if (K) dropped(B, T, d, n, K, R.data(), &hp, &lp, &hq, &lq);
    S* a = A + (n - n0) * w;
    const bool next = n + 1 < n0 + TA;  // the next step's rows (a sequence apart) asked for during this one's
    if (kind == 0) {
      mm(B, 2 * d, d, hp, lp, Wht, 2 * d, S(1), a, la);                  // [s_c s_g] += h [W1; W3]^T
      if (hq) mm(B, d, d, hq, lq, W2t, d, S(1), a, la);                  // s_c += h_{n−m} W2^T
      for (i64 b = 0; b < B; ++b) {
        relax_fwd(d, h, a + b * la + d, a + b * la, hp + b * lp, H + n * d + b * ls);
        if (next) prefetch(a + w + b * la, w);
      }
    } else if (kind == 1) {
      mm(B, d, d, hp, lp, Wht, 3 * d, S(1), a, la);                      // s_u += h W1^T
      mm(B, 2 * d, d, hp, lp, Wht + d, 3 * d, S(1), a + 2 * d, la);      // [s_g s_a] += h [W3; W4]^T
      if (hq) mm(B, d, d, hq, lq, W2t, d, S(1), a + d, la);              // s_z += h_{n−m} W2^T
      for (i64 b = 0; b < B; ++b) {
        tau_step(d, h, alpha, beta, a + b * la, hp + b * lp, H + n * d + b * ls);
        if (next) prefetch(a + w + b * la, w);
      }
    } else {
      for (int r : {0, 2, 3})                                            // s_r += h W_r^T, the present maps of h
        if (L.e[r] >= 0) mm(B, d, d, hp, lp, Wht + L.w[r] * d, L.nh * d, S(1), a + L.e[r] * d, la);
      if (hq && L.e[1] >= 0) mm(B, d, d, hq, lq, W2t, d, S(1), a + L.e[1] * d, la);
      for (i64 b = 0; b < B; ++b)
        tau_ablated_step(d, h, alpha, beta, L, a + b * la, hp + b * lp, H + n * d + b * ls);
    }
  }
}

// Pend (pending_slots(T, m) x B x d, zeroed): a ring of the gradients that later steps' delayed reads send back to
// the states still to be reached. K as gdelay_fwd: the step's gradient to its dropped start (and delayed read) is
// multiplied by the same factor on its way to the state.
template <typename S>
void gdelay_bwd(int kind, i64 B, i64 T, i64 d, i64 m, const S* A, const S* h0, const S* Wh, const S* W2, double hd,
                double al, double be, const S* H, const S* dY, S* gh, S* dA, S* Pend, const S* K, const TauLayout& L) {
  const S h = S(hd), alpha = S(al), beta = S(be);
  const i64 ls = T * d, w = gate_width(kind, d, L), la = T * w, R = pending_slots(T, m),
            lk = T * 2 * d;
  const bool reads_delayed = kind != 2 || L.e[1] >= 0;
  std::vector<S> G(B * d), D(K ? 2 * B * d : 0), Q(K ? B * d : 0);
  for (i64 n = T - 1; n >= 0; --n) {
    i64 lp = d, lq = d;
    const S* hp = delay_state(H, h0, n, d, ls, &lp);
    const S* hq = nullptr;
    if (K) dropped(B, T, d, n, K, D.data(), &hp, &lp, &hq, &lq);  // the start only: the delayed read is not needed
    // the delayed read's gradient: straight into its state's slot, or through Q and its factor
    S* delayed = reads_delayed && n - m >= 0 ? (K ? Q.data() : Pend + (n - m) % R * B * d) : nullptr;
    const S keep_sum = K ? S(0) : S(1);
    const S* a = A + n * w; S* da = dA + n * w;
    // gh: dL/d state_{n+1} = what came back + the output gradient + the delayed reads of it (its slot is then
    // free for state n − m − 1, which step n − 1 writes)
    add_step(B, d, gh, dY, n, ls);
    S* pend = Pend + (n + 1) % R * B * d;
    add_step(B, d, gh, pend, 0, d);
    std::fill(pend, pend + B * d, S(0));
    // the previous step's rows (a sequence apart), asked for during this one's: pre-activations, their gradients, dY
    const auto ahead = [&](i64 b) {
      if (n == 0) return;
      prefetch(a - w + b * la, w); prefetch(da - w + b * la, w);
      if (dY) prefetch(dY + b * ls + (n - 1) * d, d);
    };
    if (kind == 0) {
      for (i64 b = 0; b < B; ++b) {
        relax_bwd(d, h, a + b * la + d, a + b * la, hp + b * lp, gh + b * d, G.data() + b * d, da + b * la + d,
                  da + b * la);
        ahead(b);
      }
      std::memcpy(gh, G.data(), B * d * sizeof(S));
      mm(B, d, 2 * d, da, la, Wh, d, S(1), gh, d);                       // += [ds_c ds_g] [W1; W3]
      if (delayed) mm(B, d, d, da, la, W2, d, keep_sum, delayed, d);
    } else if (kind == 1) {
      for (i64 b = 0; b < B; ++b) {
        tau_step_bwd(d, h, alpha, beta, a + b * la, hp + b * lp, da + b * la, gh + b * d);
        ahead(b);
      }
      mm(B, d, d, da, la, Wh, d, S(1), gh, d);                           // += ds_u W1
      mm(B, d, 2 * d, da + 2 * d, la, Wh + d * d, d, S(1), gh, d);       // += [ds_g ds_a] [W3; W4]
      if (delayed) mm(B, d, d, da + d, la, W2, d, keep_sum, delayed, d);
    } else {
      for (i64 b = 0; b < B; ++b)
        tau_ablated_step_bwd(d, h, alpha, beta, L, a + b * la, hp + b * lp, da + b * la, gh + b * d);
      for (int r : {0, 2, 3})                                            // += ds_r W_r
        if (L.e[r] >= 0) mm(B, d, d, da + L.e[r] * d, la, Wh + L.w[r] * d * d, d, S(1), gh, d);
      if (delayed) mm(B, d, d, da + L.e[1] * d, la, W2, d, keep_sum, delayed, d);
    }
    if (K) {  // gh was dL/d(start) and Q dL/d(delayed read): times their factors, to the states
      S* pend = delayed ? Pend + (n - m) % R * B * d : nullptr;
      for (i64 b = 0; b < B; ++b) {
        const S* __restrict__ k = K + b * lk + n * 2 * d; S* __restrict__ g = gh + b * d;
        for (i64 j = 0; j < d; ++j) g[j] *= k[j];
        if (pend) {
          const S* __restrict__ q = Q.data() + b * d; S* __restrict__ p = pend + b * d;
          for (i64 j = 0; j < d; ++j) p[j] += k[d + j] * q[j];
        }
      }
    }
  }
  for (i64 b = 0; b < B; ++b) for (i64 j = 0; j < d; ++j) gh[b * d + j] += Pend[b * d + j];  // state 0 = h0
}

// =====================================================================================================
// Liquid cells (004 eqs. 1-5): one chemical synapse from every presynaptic y_j, y = [h, x] (m neurons, then the
// n inputs), to every neuron i:
//   f_i = Σ_j g_ji σ(a_ji y_j + b_ji) + g_li,   u_i = Σ_j k_ji σ(a_ji y_j + b_ji) + g_li,
// and for LRC w_i = Σ_j o_ji y_j + p_i, whose input part w_in = O_x^T x + p (B·T, m) comes from torch. The L
// sub-steps s = n L + q of sample n (input x_n) store their conductances [f | u | w] in C (B·T·L, w = 2m or 3m);
// H (B, T, m) holds the sample states (sub-steps L-1, 2L-1, ...). Update of h (δ = the sub-step):
//   kind 0, LTC  + semi-implicit Euler:  h' = (h + δ u e_l) / (1 + δ f)
//   kind 1, STC  + semi-implicit Euler:  h' = (h + δ tanh(u) e_l) / (1 + δ σ(f))
//   kind 2/3, LRC (asymmetric / symmetric elastance) + Euler:
//            h' = h + δ (ε tanh(u) e_l − ε σ(f) h),  ε = σ(w)  or  σ(w + k) − σ(w − k)
// Synapse matrices G, Aa, Bb, K: (m + n) x m, presynaptic index first (the neurons' rows, then the inputs').
//
// The synapses (B·m² sigmoids a sub-step from the neurons, the whole cost) run over chunks of LANES
// postsynaptic neurons i, one float vector register, with the four matrices packed chunk-major and zero-padded
// past m (pack_synapses): the forward holds ROWS batch rows' f and u of one chunk in registers while it runs over
// the presynaptic j; the backward holds a chunk's four parameter-gradient sums in registers while it runs over
// the batch, and adds them into the double accumulators once a sub-step. Padded lanes see a = b = g = k = 0 and
// zero gradients, so they add nothing. The inputs' synapses are summed once a sample (shared by its sub-steps).
// =====================================================================================================
#if defined(__AVX512F__)
constexpr i64 LANES = 16;
#else
constexpr i64 LANES = 8;
#endif
constexpr int ROWS = 4;
constexpr float OPENING_SCALE = -0x1.715476p+4f;  // −16 log2(e): opening16's parameters

#if defined(__AVX512F__)
// The openings σ(a y + b) of 16 synapses (float32), with fewer multiply-adds than sigmoid() (the synapse loops are
// bound by those ports). From a' = −16 log2(e) a and b' = −16 log2(e) b, packed beside a and b:
// w = a' y + b' = 16 log2(e^{−(a y + b)}), clamped to a y + b in [−88, 87] (NaN passes through);
// w = 16 k + j + f with |f| ≤ 1/2 (the rounding to integers by adding 1.5 · 2^23), and
// e^{−(a y + b)} = 2^k · 2^{j/16} · 2^{f/16}: 2^{j/16} from a 16-entry table in one register (vpermps), 2^k added to
// its exponent bits, 2^{f/16} to third order (error 1e-8 relative); then 1 / (1 + e). Error: about 1 ulp of 1, and
// relative where σ is small about |a y + b| times float32's rounding (as rounding a y + b to float32 gives).
inline __m512 opening16(__m512 as, __m512 y, __m512 bs) {
  const __m512 one = _mm512_set1_ps(1.0f), round = _mm512_set1_ps(12582912.0f);
  const __m512 powers = _mm512_setr_ps(0x1.000000p+0f, 0x1.0b5586p+0f, 0x1.172b84p+0f, 0x1.2387a6p+0f,
                                       0x1.306fe0p+0f, 0x1.3dea64p+0f, 0x1.4bfdaep+0f, 0x1.5ab07ep+0f,
                                       0x1.6a09e6p+0f, 0x1.7a1148p+0f, 0x1.8ace54p+0f, 0x1.9c4918p+0f,
                                       0x1.ae89fap+0f, 0x1.c199bep+0f, 0x1.d5818ep+0f, 0x1.ea4afap+0f);  // 2^{j/16}
  __m512 w = _mm512_fmadd_ps(as, y, bs);
  w = _mm512_min_ps(_mm512_set1_ps(OPENING_SCALE * -88.0f), _mm512_max_ps(_mm512_set1_ps(OPENING_SCALE * 87.0f), w));
  const __m512 u = _mm512_add_ps(w, round);  // 16 k + j in the low bits
  const __m512 f = _mm512_sub_ps(w, _mm512_sub_ps(u, round));  // exact
  __m512 e = _mm512_fmadd_ps(_mm512_set1_ps(0x1.c6b08ep-17f), f, _mm512_set1_ps(0x1.ebfbe0p-11f));  // (ln2/16)^n / n!
  e = _mm512_fmadd_ps(_mm512_fmadd_ps(e, f, _mm512_set1_ps(0x1.62e430p-5f)), f, one);
  const __m512i bits = _mm512_castps_si512(u);
  const __m512 scale = _mm512_castsi512_ps(_mm512_add_epi32(
      _mm512_castps_si512(_mm512_permutexvar_ps(bits, powers)), _mm512_slli_epi32(_mm512_srai_epi32(bits, 4), 23)));
  return _mm512_div_ps(one, _mm512_fmadd_ps(e, scale, one));
}
#endif

// Whether the synapse loops of S run on opening16 (float32 on AVX-512), and the fields packed per synapse
#if defined(__AVX512F__)
template <typename S> constexpr bool VECTOR_OPENINGS = std::is_same<S, float>::value;
#else
template <typename S> constexpr bool VECTOR_OPENINGS = false;
#endif
template <typename S> constexpr i64 FIELDS = VECTOR_OPENINGS<S> ? 5 : 4;

// P[c][j][q][l] = (a, b, g, k)[q] of the synapse j -> c LANES + l, for the J rows j of the (J x m) matrices
// (0 past m); for opening16 (a', b', g, k, a) with a' = OPENING_SCALE a, b' = OPENING_SCALE b
template <typename S>
std::vector<S> pack_synapses(i64 J, i64 m, const S* G, const S* Aa, const S* Bb, const S* K) {
  const i64 nc = (m + LANES - 1) / LANES, q = FIELDS<S> * LANES;
  const S scale = VECTOR_OPENINGS<S> ? S(OPENING_SCALE) : S(1);
  std::vector<S> P(nc * J * q, S(0));
  for (i64 c = 0; c < nc; ++c)
    for (i64 j = 0; j < J; ++j) {
      S* p = P.data() + (c * J + j) * q;
      for (i64 l = 0; l < LANES && c * LANES + l < m; ++l) {
        const i64 ji = j * m + c * LANES + l;
        p[l] = scale * Aa[ji]; p[LANES + l] = scale * Bb[ji]; p[2 * LANES + l] = G[ji]; p[3 * LANES + l] = K[ji];
        if (FIELDS<S> == 5) p[4 * LANES + l] = Aa[ji];
      }
    }
  return P;
}

// R rows (stride ly of y, lf of the conductances f; u = f + m), chunk c of the J presynaptic rows packed in P:
// f_i += Σ_j g_ji σ(a_ji y_j + b_ji), u_i += Σ_j k_ji σ(a_ji y_j + b_ji), in the order j = 0, 1, ...
template <typename S, int R>
void synapse_rows_fwd(i64 J, i64 m, i64 c, const S* __restrict__ P, const S* __restrict__ y, i64 ly,
                      S* __restrict__ f, i64 lf) {
  const i64 i0 = c * LANES, len = std::min(LANES, m - i0);
#if defined(__AVX512F__)
  if constexpr (VECTOR_OPENINGS<S>) {
    const __mmask16 lanes = (__mmask16)((1u << len) - 1u);
    __m512 F[R], U[R];
    for (int r = 0; r < R; ++r) {
      F[r] = _mm512_maskz_loadu_ps(lanes, f + r * lf + i0);
      U[r] = _mm512_maskz_loadu_ps(lanes, f + r * lf + m + i0);
    }
    const float* __restrict__ p = P + c * J * FIELDS<S> * LANES;
    for (i64 j = 0; j < J; ++j, p += FIELDS<S> * LANES) {
      const __m512 pa = _mm512_loadu_ps(p), pb = _mm512_loadu_ps(p + LANES), pg = _mm512_loadu_ps(p + 2 * LANES),
                   pk = _mm512_loadu_ps(p + 3 * LANES);
      for (int r = 0; r < R; ++r) {
        const __m512 o = opening16(pa, _mm512_set1_ps(y[r * ly + j]), pb);
        F[r] = _mm512_fmadd_ps(pg, o, F[r]);
        U[r] = _mm512_fmadd_ps(pk, o, U[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(f + r * lf + i0, lanes, F[r]);
      _mm512_mask_storeu_ps(f + r * lf + m + i0, lanes, U[r]);
    }
    return;
  }
#endif
  S F[R][LANES], U[R][LANES];
  for (int r = 0; r < R; ++r)
    for (i64 l = 0; l < LANES; ++l) {
      F[r][l] = l < len ? f[r * lf + i0 + l] : S(0);
      U[r][l] = l < len ? f[r * lf + m + i0 + l] : S(0);
    }
  const S* __restrict__ p = P + c * J * FIELDS<S> * LANES;
  for (i64 j = 0; j < J; ++j, p += FIELDS<S> * LANES)
    for (int r = 0; r < R; ++r) {
      const S yj = y[r * ly + j];
      for (i64 l = 0; l < LANES; ++l) {
        const S o = sigmoid(p[l] * yj + p[LANES + l]);
        F[r][l] += p[2 * LANES + l] * o;
        U[r][l] += p[3 * LANES + l] * o;
      }
    }
  for (int r = 0; r < R; ++r)
    for (i64 l = 0; l < len; ++l) { f[r * lf + i0 + l] = F[r][l]; f[r * lf + m + i0 + l] = U[r][l]; }
}

// Synapses a sub-step from which the loops split between OpenMP threads (below, a fork and join would cost
// more than the work; the split never changes a result: every sum stays in one thread, in the same order).
constexpr i64 PARALLEL_SYNAPSES = 1 << 15;

// The B rows of y (stride ly) through the J presynaptic rows packed in P, into f, u (stride lf): tasks of
// (chunk, ROWS batch rows), chunk-major, shared between the threads.
template <typename S>
void synapses_fwd(i64 B, i64 J, i64 m, const S* P, const S* y, i64 ly, S* f, i64 lf, int threads) {
  if (J == 0) return;
  const i64 blocks = (B + ROWS - 1) / ROWS, tasks = (m + LANES - 1) / LANES * blocks;
#pragma omp parallel for num_threads(threads) if (threads > 1 && B * J * m >= PARALLEL_SYNAPSES) schedule(static)
  for (i64 t = 0; t < tasks; ++t) {
    const i64 c = t / blocks, b0 = t % blocks * ROWS;
    if (b0 + ROWS <= B) synapse_rows_fwd<S, ROWS>(J, m, c, P, y + b0 * ly, ly, f + b0 * lf, lf);
    else for (i64 b = b0; b < B; ++b) synapse_rows_fwd<S, 1>(J, m, c, P, y + b * ly, ly, f + b * lf, lf);
  }
}

// One batch row's update h -> o from its conductances f, u (and w): the forward's, and the backward's recomputation
// of a sample's sub-step states (the same code, the same bits).
template <typename S>
void liquid_update(int kind, i64 m, S h, const S* __restrict__ f, const S* __restrict__ u, const S* __restrict__ wv,
                   const S* __restrict__ x, const S* __restrict__ el, const S* __restrict__ ksh, S* __restrict__ o) {
  if (kind == 0) for (i64 i = 0; i < m; ++i) o[i] = (x[i] + h * (u[i] * el[i])) / (S(1) + h * f[i]);
  else if (kind == 1)
    for (i64 i = 0; i < m; ++i) o[i] = (x[i] + h * (tanh_(u[i]) * el[i])) / (S(1) + h * sigmoid(f[i]));
  else for (i64 i = 0; i < m; ++i) {
    const S e = kind == 2 ? sigmoid(wv[i]) : sigmoid(wv[i] + ksh[i]) - sigmoid(wv[i] - ksh[i]);
    o[i] = x[i] + h * (e * tanh_(u[i]) * el[i] - e * sigmoid(f[i]) * x[i]);
  }
}

// X (B, T, n); gl: g_l (m); Win (B·T, m): LRC's input part of w, else null. H (B, T, m) receives the sample states;
// a sample's other sub-steps run in scratch rows. C: every sub-step's conductances, stored for the backward (null
// when there is none, e.g. under torch.no_grad()).
template <typename S>
void liquid_fwd(int kind, i64 B, i64 T, i64 m, i64 n, i64 L, int threads, const S* X, const S* h0, const S* G,
                const S* Aa, const S* Bb, const S* K, const S* gl, const S* el, const S* Oh, const S* ksh,
                const S* Win, double hd, S* C, S* H, const S* hs) {  // hs (B, T): a sample's sub-step (or null: h)
  const S h = S(hd);
  const bool store = C != nullptr;
  const i64 TS = T * L, w = kind >= 2 ? 3 * m : 2 * m, lc = store ? TS * w : w, lx = T * n, ls = T * m;
  const i64 inputs = m * m;  // offset of the inputs' rows in the synapse matrices
  const std::vector<S> P = pack_synapses(m, m, G, Aa, Bb, K);
  const std::vector<S> Pin = pack_synapses(n, m, G + inputs, Aa + inputs, Bb + inputs, K + inputs);
  std::vector<S> In(B * 2 * m);  // the sample's leak + input synapses [f_in | u_in], rows of 2m
  std::vector<S> Cs(store ? 0 : B * w), Ring(L > 1 ? 2 * B * m : 0);
  const S* hp = h0; i64 lp = m;  // the state before sub-step s: rows of stride lp
  for (i64 s = 0; s < TS; ++s) {
    const i64 ns = s / L;
    // this sub-step's state: a sample state (H) or a scratch row
    S* out = s % L == L - 1 ? H + ns * m : Ring.data() + s % 2 * B * m;
    const i64 lo = s % L == L - 1 ? ls : m;
    if (s % L == 0) {
      for (i64 b = 0; b < B; ++b)
        for (i64 i = 0; i < m; ++i) In[b * 2 * m + i] = In[b * 2 * m + m + i] = gl[i];
      synapses_fwd(B, n, m, Pin.data(), X + ns * n, lx, In.data(), 2 * m, threads);
    }
    S* a = store ? C + s * w : Cs.data();
    for (i64 b = 0; b < B; ++b) {
      std::memcpy(a + b * lc, In.data() + b * 2 * m, 2 * m * sizeof(S));
      if (kind >= 2) {
        std::memcpy(a + b * lc + 2 * m, Win + (b * T + ns) * m, m * sizeof(S));
        if (ns + 1 < T && (s + 1) % L == 0) prefetch(Win + (b * T + ns + 1) * m, m);  // the next sample's row
      }
    }
    if (kind >= 2) mm(B, m, m, hp, lp, Oh, m, S(1), a + 2 * m, lc);     // w += h O_h
    synapses_fwd(B, m, m, P.data(), hp, lp, a, lc, threads);
    for (i64 b = 0; b < B; ++b) {
      const S* f = a + b * lc;
      liquid_update(kind, m, hs ? hs[b * T + ns] : h, f, f + m, f + 2 * m, hp + b * lp, el, ksh, out + b * lo);
    }
    hp = out; lp = lo;
  }
}

#if defined(__AVX512F__)
// R batch rows of synapse_column_bwd's loop over the batch (float32, chunk c of the postsynaptic neurons; pa, pb
// opening16's a', b', a the synapses' a): the openings o, ds = (df g + du k) o (1 − o), the sums of df o, ds y, ds,
// du o, and each row's ds a (scratch).
template <bool FIRST, int R>
inline void synapse_rows_bwd16(const float* __restrict__ D, i64 ld, i64 c, i64 nc, const float* __restrict__ yT,
                               float* __restrict__ scratch, __m512 pa, __m512 pb, __m512 pg, __m512 pk, __m512 a,
                               __m512& sG, __m512& sA, __m512& sB, __m512& sK) {
  __m512 yj[R], o[R];
  for (int r = 0; r < R; ++r) { yj[r] = _mm512_set1_ps(yT[r]); o[r] = opening16(pa, yj[r], pb); }
  for (int r = 0; r < R; ++r) {
    const __m512 df = _mm512_loadu_ps(D + r * ld + c * LANES), du = _mm512_loadu_ps(D + r * ld + (nc + c) * LANES);
    const __m512 ds = _mm512_mul_ps(_mm512_fmadd_ps(du, pk, _mm512_mul_ps(df, pg)), _mm512_fnmadd_ps(o[r], o[r], o[r]));
    sG = _mm512_fmadd_ps(df, o[r], sG); sK = _mm512_fmadd_ps(du, o[r], sK);
    sA = _mm512_fmadd_ps(ds, yj[r], sA); sB = _mm512_add_ps(sB, ds);
    float* t = scratch + r * LANES;
    _mm512_storeu_ps(t, FIRST ? _mm512_mul_ps(ds, a) : _mm512_fmadd_ps(ds, a, _mm512_loadu_ps(t)));
  }
}

// The sums of the 16 rows of 16 floats at v (row-major), in order: a tree of in-lane and 128-bit shuffles (45
// instructions where 16 horizontal reductions take about 160).
inline __m512 row_sums16(const float* __restrict__ v) {
  __m512 pairs[8], quads[4], halves[2];
  for (int i = 0; i < 8; ++i) {  // rows 2i, 2i+1: [e0+e2, f0+f2, e1+e3, f1+f3] in each 128-bit lane
    const __m512 e = _mm512_loadu_ps(v + 32 * i), f = _mm512_loadu_ps(v + 32 * i + 16);
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(e, f), _mm512_unpackhi_ps(e, f));
  }
  for (int i = 0; i < 4; ++i)  // rows 4i..4i+3: each 128-bit lane q holds their sums over elements 4q..4q+3
    quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 2; ++i)  // lanes (q0 + q1, q2 + q3) of quads 2i, then of 2i + 1
    halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(halves[0], halves[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(halves[0], halves[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

// One sub-step of the synapses' backward, presynaptic row j of the J packed in P: o_ji = σ(a_ji y_j + b_ji) feeds
// f_i (weight g_ji) and u_i (weight k_ji). D (B x 2 mp, mp = nc LANES): [df | du] zero-padded; yT: y_j over the
// batch; gy (stride lg): += Σ_i ds_ji a_ji; acc: the double sums of dL/d(g, a, b, k) (J x m); scratch: B x LANES.
template <typename S>
void synapse_column_bwd(i64 B, i64 J, i64 m, i64 j, const S* __restrict__ P, const S* __restrict__ D,
                        const S* __restrict__ yT, S* __restrict__ gy, i64 lg, double* const* acc,
                        S* __restrict__ scratch) {
  const i64 nc = (m + LANES - 1) / LANES, ld = 2 * nc * LANES;
#if defined(__AVX512F__)
  if constexpr (VECTOR_OPENINGS<S>) {
    for (i64 c = 0; c < nc; ++c) {
      const float* __restrict__ p = P + (c * J + j) * FIELDS<S> * LANES;
      const __m512 pa = _mm512_loadu_ps(p), pb = _mm512_loadu_ps(p + LANES), pg = _mm512_loadu_ps(p + 2 * LANES),
                   pk = _mm512_loadu_ps(p + 3 * LANES), a = _mm512_loadu_ps(p + 4 * LANES);
      __m512 sG = _mm512_setzero_ps(), sA = sG, sB = sG, sK = sG;
      // ROWS batch rows at a time: their openings are independent chains of about 20 operations, interleaved here
      // so that the core overlaps them; the sums still take the rows in order
      // (the first chunk writes each row's ds a into scratch, the others add to it)
      const auto rows = [&](auto first) {
        constexpr bool F = decltype(first)::value;
        i64 b = 0;
        for (; b + ROWS <= B; b += ROWS)
          synapse_rows_bwd16<F, ROWS>(D + b * ld, ld, c, nc, yT + b, scratch + b * LANES, pa, pb, pg, pk, a, sG, sA,
                                      sB, sK);
        for (; b < B; ++b)
          synapse_rows_bwd16<F, 1>(D + b * ld, ld, c, nc, yT + b, scratch + b * LANES, pa, pb, pg, pk, a, sG, sA, sB,
                                   sK);
      };
      if (c == 0) rows(std::true_type{}); else rows(std::false_type{});
      alignas(64) float s4[4][LANES];
      _mm512_store_ps(s4[0], sG); _mm512_store_ps(s4[1], sA); _mm512_store_ps(s4[2], sB); _mm512_store_ps(s4[3], sK);
      const i64 i0 = c * LANES, len = std::min(LANES, m - i0);
      for (int q = 0; q < 4; ++q)
        for (i64 l = 0; l < len; ++l) acc[q][j * m + i0 + l] += double(s4[q][l]);
    }
    i64 b = 0;
    for (; b + 16 <= B; b += 16) {
      alignas(64) float sums[16];
      _mm512_store_ps(sums, row_sums16(scratch + b * LANES));
      for (int r = 0; r < 16; ++r) gy[(b + r) * lg + j] += sums[r];
    }
    for (; b < B; ++b) gy[b * lg + j] += _mm512_reduce_add_ps(_mm512_loadu_ps(scratch + b * LANES));
    return;
  }
#endif
  for (i64 k = 0; k < B * LANES; ++k) scratch[k] = S(0);
  for (i64 c = 0; c < nc; ++c) {
    const S* __restrict__ p = P + (c * J + j) * FIELDS<S> * LANES;
    S pa[LANES], pb[LANES], pg[LANES], pk[LANES], sG[LANES], sA[LANES], sB[LANES], sK[LANES];
    for (i64 l = 0; l < LANES; ++l) {
      pa[l] = p[l]; pb[l] = p[LANES + l]; pg[l] = p[2 * LANES + l]; pk[l] = p[3 * LANES + l];
      sG[l] = sA[l] = sB[l] = sK[l] = S(0);
    }
    for (i64 b = 0; b < B; ++b) {
      const S yj = yT[b];
      const S* __restrict__ df = D + b * ld + c * LANES; const S* __restrict__ du = df + nc * LANES;
      S* __restrict__ t = scratch + b * LANES;
      for (i64 l = 0; l < LANES; ++l) {
        const S o = sigmoid(pa[l] * yj + pb[l]);
        const S ds = (df[l] * pg[l] + du[l] * pk[l]) * o * (S(1) - o);
        sG[l] += df[l] * o; sK[l] += du[l] * o; sA[l] += ds * yj; sB[l] += ds;
        t[l] += ds * pa[l];
      }
    }
    const i64 i0 = c * LANES, len = std::min(LANES, m - i0);
    double *aG = acc[0] + j * m + i0, *aA = acc[1] + j * m + i0, *aB = acc[2] + j * m + i0, *aK = acc[3] + j * m + i0;
    for (i64 l = 0; l < len; ++l) { aG[l] += double(sG[l]); aA[l] += double(sA[l]); aB[l] += double(sB[l]);
                                    aK[l] += double(sK[l]); }
  }
  for (i64 b = 0; b < B; ++b) {
    S s = S(0);
    for (i64 l = 0; l < LANES; ++l) s += scratch[b * LANES + l];
    gy[b * lg + j] += s;
  }
}

// The update's backward for one batch row: go = dL/dh (through the update's explicit h) from g = dL/dh' (+ dy,
// the sample state's gradient), df, du (and dw) = dL/d(f, u, w), and the sums of dL/de_l, dL/dk_shift.
template <typename S>
void liquid_update_bwd(int kind, i64 m, S h, const S* __restrict__ f, const S* __restrict__ u,
                       const S* __restrict__ wv, const S* __restrict__ x, const S* __restrict__ hn,
                       const S* __restrict__ g, const S* __restrict__ dy, const S* __restrict__ el,
                       const S* __restrict__ ksh, S* __restrict__ go, S* __restrict__ df, S* __restrict__ du,
                       S* __restrict__ dw, double* __restrict__ aE, double* __restrict__ aS) {
  if (dy) for (i64 i = 0; i < m; ++i) go[i] = g[i] + dy[i];
  else for (i64 i = 0; i < m; ++i) go[i] = g[i];
  if (kind == 0) for (i64 i = 0; i < m; ++i) {
    const S G0 = go[i], den = S(1) + h * f[i];
    go[i] = G0 / den;
    du[i] = G0 * h * el[i] / den;
    aE[i] += double(G0 * h * u[i] / den);
    df[i] = -(G0 * hn[i] * h / den);
  } else if (kind == 1) for (i64 i = 0; i < m; ++i) {
    const S G0 = go[i], sf = sigmoid(f[i]), t = tanh_(u[i]), den = S(1) + h * sf;
    go[i] = G0 / den;
    du[i] = G0 * h * el[i] / den * (S(1) - t * t);
    aE[i] += double(G0 * h * t / den);
    df[i] = -(G0 * hn[i] * h / den) * sf * (S(1) - sf);
  } else for (i64 i = 0; i < m; ++i) {
    const S G0 = go[i], sf = sigmoid(f[i]), t = tanh_(u[i]);
    S e, de_dw, de_dk = S(0);
    if (kind == 2) { e = sigmoid(wv[i]); de_dw = e * (S(1) - e); }
    else {
      const S s1 = sigmoid(wv[i] + ksh[i]), s2 = sigmoid(wv[i] - ksh[i]);
      e = s1 - s2; de_dw = s1 * (S(1) - s1) - s2 * (S(1) - s2); de_dk = s1 * (S(1) - s1) + s2 * (S(1) - s2);
    }
    const S ge = G0 * h * (t * el[i] - sf * x[i]);
    go[i] = G0 - G0 * h * e * sf;
    du[i] = G0 * h * e * el[i] * (S(1) - t * t);
    df[i] = -(G0 * h * e * x[i]) * sf * (S(1) - sf);
    dw[i] = ge * de_dw;
    aE[i] += double(G0 * h * e * t);
    aS[i] += double(ge * de_dk);
  }
}

// Σ_i G0_i ∂h'_i/∂δ for one batch row (G0 = g + dy = dL/dh'; x the sub-step's start, hn its h'): the sub-step
// length's gradient. LTC: (u e_l − f h') / (1 + δ f); STC: (tanh(u) e_l − σ(f) h') / (1 + δ σ(f)); LRC: ε (tanh(u)
// e_l − σ(f) x).
template <typename S>
S liquid_dh(int kind, i64 m, S h, const S* __restrict__ f, const S* __restrict__ u, const S* __restrict__ wv,
            const S* __restrict__ x, const S* __restrict__ hn, const S* __restrict__ g, const S* __restrict__ dy,
            const S* __restrict__ el, const S* __restrict__ ksh) {
  S acc = S(0);
  for (i64 i = 0; i < m; ++i) {
    const S G0 = dy ? g[i] + dy[i] : g[i];
    if (kind == 0) acc += G0 * (u[i] * el[i] - f[i] * hn[i]) / (S(1) + h * f[i]);
    else if (kind == 1) {
      const S sf = sigmoid(f[i]);
      acc += G0 * (tanh_(u[i]) * el[i] - sf * hn[i]) / (S(1) + h * sf);
    } else {
      const S e = kind == 2 ? sigmoid(wv[i]) : sigmoid(wv[i] + ksh[i]) - sigmoid(wv[i] - ksh[i]);
      acc += G0 * e * (tanh_(u[i]) * el[i] - sigmoid(f[i]) * x[i]);
    }
  }
  return acc;
}

// H (B, T, m): the sample states; a sample's other sub-step states are recomputed from its first state and C.
// gh: in dL/dh_T, out dL/dh_0. dY (B, T, m; or null): the gradients of the sample states (sub-steps L-1, 2L-1,
// ...). dX (B, T, n), zeroed: dL/dx. dG, dAa, dBb, dK ((m + n) x m), dgl, del, dksh (m): outputs, accumulated in
// double over sub-steps (each sub-step's batch sum in S first). dOh (m x m, zeroed; or null): LRC's
// dL/dO_h = Σ h^T dL/dw; dWin (B·T, m), zeroed (LRC; else null): dL/dw summed over each sample's sub-steps.
// dhs (B, T), zeroed, or null: the gradients of the samples' sub-step lengths hs, summed over their sub-steps.
template <typename S>
void liquid_bwd(int kind, i64 B, i64 T, i64 m, i64 n, i64 L, int threads, const S* X, const S* C, const S* h0,
                const S* G, const S* Aa, const S* Bb, const S* K, const S* el, const S* OhT, const S* ksh, double hd,
                const S* H, const S* dY, S* gh, S* dX, S* dG, S* dAa, S* dBb, S* dK, S* dgl, S* del, S* dksh, S* dOh,
                S* dWin, const S* hs, S* dhs) {
  const S h = S(hd);
  const i64 TS = T * L, w = kind >= 2 ? 3 * m : 2 * m, lc = TS * w, ly = T * m, lx = T * n;
  const i64 J = m + n, inputs = m * m /* the inputs' rows */, nc = (m + LANES - 1) / LANES, mp = nc * LANES;
  const std::vector<S> P = pack_synapses(m, m, G, Aa, Bb, K);
  const std::vector<S> Pin = pack_synapses(n, m, G + inputs, Aa + inputs, Bb + inputs, K + inputs);
  std::vector<double> aG(J * m, 0.0), aA(J * m, 0.0), aB(J * m, 0.0), aK(J * m, 0.0), aL(m, 0.0), aE(m, 0.0),
      aS(m, 0.0);
  double* const acc[4] = {aG.data(), aA.data(), aB.data(), aK.data()};
  double* const acc_in[4] = {aG.data() + inputs, aA.data() + inputs, aB.data() + inputs, aK.data() + inputs};
  std::vector<S> Gn(B * m), D(B * 2 * mp, S(0)), Dw(kind >= 2 ? B * m : 0), XT(m * B), XinT(n * B);
  // the input synapses' openings are a sample's, held over its sub-steps, and their backward is linear in [df | du]:
  // it runs once a sample, on the sample's sum of D (Dsum; D itself with one sub-step a sample)
  std::vector<S> Dsum(L > 1 ? B * 2 * mp : 0, S(0));
  const S* Din = L > 1 ? Dsum.data() : D.data();
  std::vector<S> Hs((L + 1) * B * m);  // the current sample's states before its sub-steps and after each
  for (i64 s = TS - 1; s >= 0; --s) {
    const i64 ns = s / L, q = s % L;
    if (q == L - 1) {  // a new sample: its sub-step states from its first state and the stored conductances
      const S* first = ns ? H + (ns - 1) * m : h0; const i64 lf = ns ? ly : m;
      for (i64 b = 0; b < B; ++b) std::memcpy(Hs.data() + b * m, first + b * lf, m * sizeof(S));
      for (i64 r = 0; r + 1 < L; ++r)
        for (i64 b = 0; b < B; ++b) {
          const S* f = C + (ns * L + r) * w + b * lc;
          liquid_update(kind, m, hs ? hs[b * T + ns] : h, f, f + m, f + 2 * m, Hs.data() + (r * B + b) * m, el, ksh,
                        Hs.data() + ((r + 1) * B + b) * m);
        }
      for (i64 b = 0; b < B; ++b) std::memcpy(Hs.data() + (L * B + b) * m, H + ns * m + b * ly, m * sizeof(S));
    }
    const S* a = C + s * w;
    for (i64 b = 0; b < B; ++b) {
      const S* __restrict__ f = a + b * lc; const S* __restrict__ u = f + m; const S* __restrict__ wv = f + 2 * m;
      const S* __restrict__ x = Hs.data() + (q * B + b) * m; const S* __restrict__ hn = x + B * m;
      const S* __restrict__ dy = dY && q == L - 1 ? dY + b * ly + ns * m : nullptr;
      if (s > 1) prefetch(f - w, w);  // the next (earlier) sub-step's conductances
      if (q == 0 && ns > 1) prefetch(H + (ns - 2) * m + b * ly, m);  // the next sample's first state
      S* __restrict__ df = D.data() + b * 2 * mp; S* __restrict__ du = df + mp;
      S* __restrict__ dw = kind >= 2 ? Dw.data() + b * m : nullptr;
      S* __restrict__ g = gh + b * m; S* __restrict__ go = Gn.data() + b * m;
      if (dhs) dhs[b * T + ns] += liquid_dh(kind, m, hs[b * T + ns], f, u, wv, x, hn, g, dy, el, ksh);
      liquid_update_bwd(kind, m, hs ? hs[b * T + ns] : h, f, u, wv, x, hn, g, dy, el, ksh, go, df, du, dw, aE.data(),
                        aS.data());
      for (i64 i = 0; i < m; ++i) aL[i] += double(df[i] + du[i]);
      if (kind >= 2) {
        S* __restrict__ gw = dWin + (b * T + ns) * m;
        for (i64 i = 0; i < m; ++i) gw[i] += dw[i];
        if (ns > 0 && s % L == 0) prefetch(gw - m, m);
      }
      for (i64 j = 0; j < m; ++j) XT[j * B + b] = x[j];
      if (q == 0) for (i64 j = 0; j < n; ++j) XinT[j * B + b] = X[b * lx + ns * n + j];
    }
    if (L > 1) for (i64 k = 0; k < B * 2 * mp; ++k) Dsum[k] += D[k];
    // presynaptic rows j (the neurons', then, at a sample's first sub-step, the last here, the inputs'): each owns
    // its parameter sums and its gradient column
    const i64 rows = q == 0 ? J : m;
#pragma omp parallel num_threads(threads) if (threads > 1 && B * rows * m >= PARALLEL_SYNAPSES)
    {
      std::vector<S> scratch(B * LANES);
#pragma omp for schedule(static)
      for (i64 j = 0; j < rows; ++j) {
        if (j < m)
          synapse_column_bwd(B, m, m, j, P.data(), D.data(), XT.data() + j * B, Gn.data(), m, acc, scratch.data());
        else
          synapse_column_bwd(B, n, m, j - m, Pin.data(), Din, XinT.data() + (j - m) * B, dX + ns * n, lx, acc_in,
                             scratch.data());
      }
    }
    if (L > 1 && q == 0) std::fill(Dsum.begin(), Dsum.end(), S(0));
    std::memcpy(gh, Gn.data(), B * m * sizeof(S));
    if (kind >= 2) {
      mm(B, m, m, Dw.data(), m, OhT, m, S(1), gh, m);                        // += dw O_h^T
      if (dOh) mm(m, m, B, XT.data(), B, Dw.data(), m, S(1), dOh, m);      // dO_h += h^T dw
    }
  }
  for (i64 i = 0; i < J * m; ++i) { dG[i] = S(aG[i]); dAa[i] = S(aA[i]); dBb[i] = S(aB[i]); dK[i] = S(aK[i]); }
  for (i64 i = 0; i < m; ++i) { dgl[i] = S(aL[i]); del[i] = S(aE[i]); dksh[i] = S(aS[i]); }
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
void odelab_opening_f32(i64 n, const float* a, const float* y, const float* b, float* o) {  // the synapses' σ(a y + b)
#if defined(__AVX512F__)
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
    const __m512 scale = _mm512_set1_ps(OPENING_SCALE);
    _mm512_mask_storeu_ps(o + i, k, opening16(_mm512_mul_ps(scale, _mm512_maskz_loadu_ps(k, a + i)),
                                              _mm512_maskz_loadu_ps(k, y + i),
                                              _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(k, b + i))));
  }
#else
  for (i64 i = 0; i < n; ++i) o[i] = sigmoid(a[i] * y[i] + b[i]);
#endif
}
void odelab_product_f32(i64 M, i64 N, i64 K, const float* A, i64 lda, const float* B, i64 ldb, float beta, float* C,
                        i64 ldc, int transposed) {  // for the tests of the products: mm, or mm_tn (C += A^T B)
  if (transposed) mm_tn(M, N, K, A, lda, B, ldb, C, ldc);
  else mm(M, N, K, A, lda, B, ldb, beta, C, ldc);
}
void odelab_set_blas_threshold(i64 t) { blas_threshold = t; }
void odelab_set_threads(int t) { row_threads = t > 1 ? t : 1; }
int odelab_has_blas() { return (sgemm_ != nullptr && dgemm_ != nullptr) ? 1 : 0; }
#if defined(__AVX512F__)
int odelab_has_simd() { return 1; }
void odelab_set_simd(int on) { simd_products = on != 0; }
#else
int odelab_has_simd() { return 0; }
void odelab_set_simd(int) {}
#endif
}

// sizes (B, T, d); pointers A z0 y0 Wg^T Wy^T Z Y hs (hs may be null); scalars h
ODELAB_EXPORT(lem_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  lem_fwd<S>(rows, T, d, PTR(0) + b * T * 4 * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), PTR(4), s[0],
             PTR(5) + b * T * d, PTR(6) + b * T * d, at(PTR(7), b * T)); }))
// sizes (B, T, d); pointers A z0 y0 Wg Wy Z Y dY gz gy dA hs dhs (dY, hs, dhs may be null); scalars h
ODELAB_EXPORT(lem_backward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  lem_bwd<S>(rows, T, d, PTR(0) + b * T * 4 * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), PTR(4), s[0],
             PTR(5) + b * T * d, PTR(6) + b * T * d, at(PTR(7), b * T * d), PTR(8) + b * d, PTR(9) + b * d,
             PTR(10) + b * T * 4 * d, at(PTR(11), b * T), at(PTR(12), b * T)); }))
// sizes (B, T, d, implicit); pointers A z0 y0 𝒲^T W^T Z Y hs (hs may be null); scalars h γ ε
ODELAB_EXPORT(cornn_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  cornn_fwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), PTR(4), s[0], s[1], s[2],
               (int)n[3], PTR(5) + b * T * d, PTR(6) + b * T * d, at(PTR(7), b * T)); }))
// sizes (B, T, d, implicit); pointers A 𝒲 W dY gz gy dA hs z0 y0 Z Y dhs (dY, hs, dhs may be null; the states are
// read for dhs only); scalars h γ ε
ODELAB_EXPORT(cornn_backward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  cornn_bwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1), PTR(2), s[0], s[1], s[2], (int)n[3], at(PTR(3), b * T * d),
               PTR(4) + b * d, PTR(5) + b * d, PTR(6) + b * T * d, at(PTR(7), b * T), at(PTR(8), b * d),
               at(PTR(9), b * d), at(PTR(10), b * T * d), at(PTR(11), b * T * d), at(PTR(12), b * T)); }))
// sizes (B, T, d); pointers A z0 y0 w k Z Y; scalars h α
ODELAB_EXPORT(unicornn_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  unicornn_fwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), PTR(4), s[0], s[1],
                  PTR(5) + b * T * d, PTR(6) + b * T * d); }))
// sizes (B, T, d); pointers A y0 w k Z Y dY gz gy dA dw dk; scalars h α
ODELAB_EXPORT(unicornn_backward, unicornn_bwd<S>(n[0], n[1], n[2], PTR(0), PTR(1), PTR(2), PTR(3), s[0], s[1], PTR(4),
                                                 PTR(5), PTR(6), PTR(7), PTR(8), PTR(9), PTR(10), PTR(11)))
// sizes (B, T, d); pointers A w k z y Y; scalars h α
ODELAB_EXPORT(unicornn_reversible_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  unicornn_rev_fwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1), PTR(2), s[0], s[1], PTR(3) + b * d, PTR(4) + b * d,
                      PTR(5) + b * T * d); }))
// sizes (B, T, d); pointers A w k z y dY gz gy dw dk; scalars h α
ODELAB_EXPORT(unicornn_reversible_backward, unicornn_rev_bwd<S>(n[0], n[1], n[2], PTR(0), PTR(1), PTR(2), s[0], s[1],
                                                                PTR(3), PTR(4), PTR(5), PTR(6), PTR(7), PTR(8), PTR(9)))
// sizes (B, T, d); pointers A C h0 [W_r; W_f]^T W_u^T b_hu H hs (hs may be null); scalars Δ
ODELAB_EXPORT(gru_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  gru_fwd<S>(rows, T, d, PTR(0) + b * T * 3 * d, PTR(1) + b * T * d, PTR(2) + b * d, PTR(3), PTR(4), PTR(5), s[0],
             PTR(6) + b * T * d, at(PTR(7), b * T)); }))
// sizes (B, T, d); pointers A C h0 [W_r; W_f] W_u H dY gh dA dC hs dhs (dY, hs, dhs may be null); scalars Δ
ODELAB_EXPORT(gru_backward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  gru_bwd<S>(rows, T, d, PTR(0) + b * T * 3 * d, PTR(1) + b * T * d, PTR(2) + b * d, PTR(3), PTR(4), s[0],
             PTR(5) + b * T * d, at(PTR(6), b * T * d), PTR(7) + b * d, PTR(8) + b * T * 3 * d, PTR(9) + b * T * d,
             at(PTR(10), b * T), at(PTR(11), b * T)); }))
// sizes (B, T, d); pointers A z0 y0 W^T Z Y hs (hs may be null); scalars h
ODELAB_EXPORT(osc_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  osc_fwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), s[0], PTR(4) + b * T * d,
             PTR(5) + b * T * d, at(PTR(6), b * T)); }))
// sizes (B, T, d); pointers A W dY gz gy dA hs Z dhs (dY, hs, dhs may be null; Z read for dhs); scalars h
ODELAB_EXPORT(osc_backward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  osc_bwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1), s[0], at(PTR(2), b * T * d), PTR(3) + b * d, PTR(4) + b * d,
             PTR(5) + b * T * d, at(PTR(6), b * T), at(PTR(7), b * T * d), at(PTR(8), b * T)); }))
// The ablated τ-GRU's layout (kind 2) from sizes n[k …]: ne nh e_u e_z e_g e_a w_u w_g w_a.
inline TauLayout tau_layout(const i64* n) { return {n[0], n[1], {n[2], n[3], n[4], n[5]}, {n[6], -1, n[7], n[8]}}; }
// sizes (kind, B, T, d, m, n0, TA, layout (9, tau_layout)); pointers A h0 weight_h^T W2^T H K (K: dropout factors,
// may be null); scalars Δ α β
ODELAB_EXPORT(gdelay_forward, over_rows<S>(n[1], [&](i64 b, i64 rows) {
  const int kind = (int)n[0]; const i64 T = n[2], d = n[3], TA = n[6]; const TauLayout L = tau_layout(n + 7);
  gdelay_fwd<S>(kind, rows, T, d, n[4], n[5], TA, PTR(0) + b * TA * gate_width(kind, d, L), PTR(1) + b * d, PTR(2),
                PTR(3), s[0], s[1], s[2], PTR(4) + b * T * d, at(PTR(5), b * T * 2 * d), L); }))
// sizes (kind, B, T, d, m, layout (9, tau_layout)); pointers A h0 weight_h W2 H dY gh dA Pend (a zero ring: see
// pending_slots) K (may be null); scalars Δ α β. A range of rows gets its own contiguous slots x rows x d of the ring.
ODELAB_EXPORT(gdelay_backward, over_rows<S>(n[1], [&](i64 b, i64 rows) {
  const int kind = (int)n[0]; const i64 T = n[2], d = n[3], m = n[4]; const TauLayout L = tau_layout(n + 5);
  const i64 w = gate_width(kind, d, L);
  gdelay_bwd<S>(kind, rows, T, d, m, PTR(0) + b * T * w, PTR(1) + b * d, PTR(2), PTR(3), s[0], s[1], s[2],
                PTR(4) + b * T * d, at(PTR(5), b * T * d), PTR(6) + b * d, PTR(7) + b * T * w,
                PTR(8) + pending_slots(T, m) * b * d, at(PTR(9), b * T * 2 * d), L); }))
// sizes (R, n, w); pointers X V^T b A (b may be null)
ODELAB_EXPORT(affine_forward, over_rows<S>(n[0], [&](i64 r0, i64 rows) {
  affine_fwd<S>(rows, n[1], n[2], PTR(0) + r0 * n[1], PTR(1), PTR(2), PTR(3) + r0 * n[2]); }))
// sizes (R, n, w); pointers dA X dV^T db (db may be null)
ODELAB_EXPORT(affine_backward, affine_bwd<S>(n[0], n[1], n[2], PTR(0), PTR(1), PTR(2), PTR(3)))
// sizes (R, w, c0, nc, d); pointers dA X O
ODELAB_EXPORT(column_products, over_rows<S>(n[3], [&](i64 r0, i64 rows) {
  column_products<S>(n[0], n[1], n[2] + r0, rows, n[4], PTR(0), PTR(1), PTR(2) + r0 * n[4]); }))
// sizes (B, T, w, c0, nc, d, s, f); pointers dA H h0 O F (the dropout factors, may be null)
ODELAB_EXPORT(state_products, over_rows<S>(n[4], [&](i64 r0, i64 rows) {  // rows of O: columns of dA
  state_products<S>(n[0], n[1], n[2], n[3] + r0, rows, n[5], n[6], PTR(0), PTR(1), PTR(2), PTR(3) + r0 * n[5],
                    PTR(4), n[7]); }))
// sizes (kind, B, T, m, n, L, threads); pointers X h0 G Aa Bb K g_l e_l O_h k_shift W_in C H hs; scalars δ
ODELAB_EXPORT(liquid_forward, liquid_fwd<S>((int)n[0], n[1], n[2], n[3], n[4], n[5], usable_threads((int)n[6]), PTR(0), PTR(1), PTR(2),
                                            PTR(3), PTR(4), PTR(5), PTR(6), PTR(7), PTR(8), PTR(9), PTR(10), s[0],
                                            PTR(11), PTR(12), PTR(13)))
// sizes (kind, B, T, m, n, L, threads); pointers X C h0 G Aa Bb K e_l O_h^T k_shift H dY gh dX dG dAa dBb dK dg_l
// de_l dk_shift dO_h dW_in hs dhs (dhs: zeroed, or null); scalars δ
ODELAB_EXPORT(liquid_backward, liquid_bwd<S>((int)n[0], n[1], n[2], n[3], n[4], n[5], usable_threads((int)n[6]), PTR(0), PTR(1), PTR(2),
                                             PTR(3), PTR(4), PTR(5), PTR(6), PTR(7), PTR(8), PTR(9), s[0], PTR(10),
                                             PTR(11), PTR(12), PTR(13), PTR(14), PTR(15), PTR(16), PTR(17), PTR(18),
                                             PTR(19), PTR(20), PTR(21), PTR(22), PTR(23), PTR(24)))
"""
