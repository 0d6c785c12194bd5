// ---- matrix products ---------------------------------------------------------------------------------
// Row-major C (M x N, ldc) = beta C + A B, A (M x K, lda), B (K x N, ldb). A layer x W^T is computed as
// x (W^T) with W^T passed contiguous from torch, so that every product here has this one form: the plain
// loops then vectorise over j (no reduction), and large products go to the BLAS.
namespace {

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

}  // namespace
