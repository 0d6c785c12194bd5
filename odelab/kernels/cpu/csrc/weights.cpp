// ---- weight gradients step by step ---------------------------------------------------------------------
// A weight W in the products W state_n of every step n has the gradient Σ_n dA_n^T state_n, dA_n (B x nc) a column
// slice of step n's pre-activation gradients. A backward adds step n's term while dA_n is still in cache: a product
// over all steps afterwards reads the whole dA back from memory (LEM at (128, 1000, 128), one Zen 4 core: 67-85
// GFLOPS, against about 95 step by step). Its threads (over_rows_in_step) each write their rows of dA_n, wait for
// one another, then each adds its share of the terms' rows over all B rows of the batch: every element is summed
// over the rows and the steps in one order, so the bits do not depend on the thread count.
namespace {

// One weight's term: O (nc x d) += dA[:, n, c0 : c0 + nc]^T state, dA (B, T, w); the state of step n is state
// n − lag of the sequence state_0 = h0 (B, d), state_k = H[:, k − 1] (H (B, T, d)); lag 0: the state the step starts
// from, −1: the one it ends at, m > 0: the delayed state h_{n−m} of the delay cells (none before state 0: no
// term). O null: not wanted.
template <typename S>
struct WeightTerm {
  const S* dA; i64 w, c0, nc;
  const S* H; const S* h0; i64 lag;
  S* O;
};

// Step n's terms, part `part` of `parts` of all their rows (all B rows of dA_n written).
template <typename S, size_t K>
void weight_step(i64 B, i64 T, i64 d, i64 n, const WeightTerm<S> (&terms)[K], int part, int parts) {
  i64 rows = 0;
  for (const auto& t : terms) rows += t.O ? t.nc : 0;
  i64 r0, r1;
  share(rows, part, parts, r0, r1);
  i64 base = 0;
  for (const auto& t : terms) {
    if (!t.O) continue;
    const i64 lo = std::max(r0, base), hi = std::min(r1, base + t.nc), k = n - t.lag;
    if (lo < hi && k >= 0)
      mm_tn(hi - lo, d, B, t.dA + n * t.w + t.c0 + (lo - base), T * t.w, k ? t.H + (k - 1) * d : t.h0, k ? T * d : d,
            t.O + (lo - base) * d, d);
    base += t.nc;
  }
}

// The callback a backward calls once its rows of step n are written: wait for every thread's, add the step's terms.
template <typename S, size_t K>
auto weights_after_step(i64 B, i64 T, i64 d, const WeightTerm<S> (&terms)[K], int part, int parts) {
  bool any = false;
  for (const auto& t : terms) any = any || t.O;
  return [=, &terms](i64 n) {
    if (!any) return;
    all_rows_done();
    weight_step(B, T, d, n, terms, part, parts);
  };
}

}  // namespace
