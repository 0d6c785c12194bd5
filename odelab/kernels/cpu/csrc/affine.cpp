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

}  // namespace
