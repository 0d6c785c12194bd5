// ---- the affine input encoding A = X V^T + b of every (sub-)step, for inputs of a few channels ------------------
// (torch's addmm writes the bias and then adds a K = n product: two passes over the whole (R, w) sequence; its
// backward one product and one sum over it.) Here one pass each way. A (R x w), X (R x n), Vt = V^T (n x w), b (w)
// or null.
namespace {

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

// dVt (n x w) = X^T dA and db (w) = the sum of dA's rows (db may be null): partial sums over blocks of RB rows in S,
// their total in double (R is every step of every sample). The blocks split between the threads, each writing its
// blocks' partial sums into P; one thread then adds them up in block order: the bits of one thread at every count.
template <typename S>
void affine_bwd(i64 R, i64 n, i64 w, const S* dA, const S* X, S* dVt, S* db) {
  constexpr i64 RB = 256;
  const i64 blocks = (R + RB - 1) / RB, q = (n + 1) * w;  // a block's sums: n rows of dVt, then db's
  std::vector<S> P(blocks * q);
  over_rows<S>(blocks, [&](i64 k0, i64 nk) {
    for (i64 k = k0; k < k0 + nk; ++k) {
      S* __restrict__ qv = P.data() + k * q;
      S* __restrict__ qb = qv + n * w;
      std::fill(qv, qv + q, S(0));
      for (i64 r = k * RB; r < std::min(R, (k + 1) * RB); ++r) {
        const S* __restrict__ a = dA + r * w;
        const S* __restrict__ x = X + r * n;
        if (db) for (i64 j = 0; j < w; ++j) qb[j] += a[j];
        for (i64 c = 0; c < n; ++c) {
          const S xc = x[c];
          for (i64 j = 0; j < w; ++j) qv[c * w + j] += xc * a[j];
        }
      }
    }
  });
  std::vector<double> total(q, 0.0);
  for (i64 k = 0; k < blocks; ++k)
    for (i64 i = 0; i < q; ++i) total[i] += P[k * q + i];
  for (i64 i = 0; i < n * w; ++i) dVt[i] = S(total[i]);
  if (db) for (i64 j = 0; j < w; ++j) db[j] = S(total[n * w + j]);
}

}  // namespace
