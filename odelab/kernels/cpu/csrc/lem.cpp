// =====================================================================================================
// LEM (000 eq. 3), "imex": z first from (z, y, u), then y from (y, z_new, u); decays explicit.
//   A (B,T,4d) = [a1 | az | a2 | ay]: on entry the encoded input (V u + b), on exit the pre-activations
//   s1 = W1 y + a1, sz = Wz y + az, s2 = W2 y + a2, sy = Wy z' + ay (the buffer is reused: no extra memory,
//   and the backward needs no recomputing product). Wgt = [W1; Wz; W2]^T (d x 3d), Wyt = Wy^T.
//   g1 = σ(s1), tz = tanh(sz), z' = z + h (g1 tz − g1 z);  g2 = σ(s2), ty = tanh(sy), y' = y + h (g2 ty − g2 y)
// =====================================================================================================
namespace {

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
// dhs (B, T) or null: the gradients of the steps' lengths hs. step_done(n): called once step n's rows of dA are
// written (weights_after_step).
template <typename S, typename StepDone>
void lem_bwd(i64 B, i64 T, i64 d, const S* A, const S* z0, const S* y0, const S* Wg, const S* Wy, double hd,
             const S* Z, const S* Y, const S* dY, S* gz, S* gy, S* dA, const S* hs, S* dhs, StepDone step_done) {
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
    step_done(n);
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

}  // namespace
