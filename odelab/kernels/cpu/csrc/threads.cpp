// ---- batch rows over threads ----------------------------------------------------------------------------
// Different samples' recurrences are independent, so a kernel can run as `threads` kernels on contiguous ranges of
// batch rows. Each range runs its rows exactly as the whole kernel would (a product block sums every element of C
// over k in the same order whatever rows lie beside it), so the results do not depend on the thread count. Only
// where the float32 products are the register blocks, one core each (MKL's, float64 or without AVX-512, thread
// themselves); at least ROWS_PER_THREAD rows a thread. odelab_set_threads: torch's thread count (extension.call).
namespace {

int row_threads = 1;
constexpr i64 ROWS_PER_THREAD = 8;

// A process forked after an OpenMP region must not open another: GNU libgomp keeps the parent's thread pool, whose
// threads the child does not have, and waits for them forever. In a forked child the kernels run on one thread.
bool forked = false;
const int fork_guard = pthread_atfork(nullptr, nullptr, [] { forked = true; });
inline int usable_threads(int threads) { return forked ? 1 : threads; }

template <typename S>
int threads_for_rows(i64 B) {
  int t = 1;
#if defined(__AVX512F__) && defined(_OPENMP)
  if (std::is_same<S, float>::value && simd_products)
    t = (int)std::max<i64>(1, std::min<i64>(usable_threads(row_threads), B / ROWS_PER_THREAD));
#endif
  return t;
}

template <typename S, typename Body>
void over_rows(i64 B, Body body) {
  const int t = threads_for_rows<S>(B);
  if (t <= 1) { body(i64(0), B); return; }
#pragma omp parallel for num_threads(t) schedule(static)
  for (int i = 0; i < t; ++i) body(B * i / t, B * (i + 1) / t - B * i / t);
}

// As over_rows, for a body that shares work between its threads step by step: body(b0, rows, part, parts) runs in
// one team of `parts` threads, and may wait for all of them at all_rows_done() (an OpenMP barrier), after which
// part `part` takes its share of a step's products over every row (whose sums then do not depend on `parts`).
template <typename S, typename Body>
void over_rows_in_step(i64 B, Body body) {
  const int t = threads_for_rows<S>(B);
  if (t <= 1) { body(i64(0), B, 0, 1); return; }
#pragma omp parallel num_threads(t)
  {
#if defined(_OPENMP)
    const int i = omp_get_thread_num(), n = omp_get_num_threads();
#else
    const int i = 0, n = 1;
#endif
    body(B * i / n, B * (i + 1) / n - B * i / n, i, n);
  }
}

inline void all_rows_done() {
#pragma omp barrier
}

// [r0, r1): part `part` of `parts` equal shares of n rows
inline void share(i64 n, int part, int parts, i64& r0, i64& r1) { r0 = n * part / parts; r1 = n * (part + 1) / parts; }

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

// The gradient of a weight W in the products W state_{n−s} of steps n = s … T−1 under state dropout (state 0 = h0,
// state k >= 1 = H[:, k−1], zero before 0; the dropout factors F (B, T, 2, d)): O (nc x d) = Σ_b Σ_n
// dA[b, n, c0 : c0 + nc]^T (F[b, n, f] ⊙ state_{n−s}[b]), dA (B, T, w), the states as step n read them, a sample at a
// time in R, then one product over its steps. (Without dropout the backwards add these terms step by step:
// weights.cpp.)
template <typename S>
void state_products(i64 B, i64 T, i64 w, i64 c0, i64 nc, i64 d, i64 s, const S* dA, const S* H, const S* h0,
                    S* O, const S* F, i64 f) {
  std::fill(O, O + nc * d, S(0));
  if (s >= T) return;
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
}

}  // namespace
