// =====================================================================================================
// Neural oscillator (002 eq. 4.1) + symplectic Euler:  s = W y + a (in place in A (B·T, d)),
//   z' = z + h tanh(s),  y' = y + h z'
// =====================================================================================================
namespace {

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

// hs (B, T): per-sample steps, or null; dhs (B, T) or null: the gradients of their lengths (Z: the z', read then);
// step_done: as lem_bwd
template <typename S, typename StepDone>
void osc_bwd(i64 B, i64 T, i64 d, const S* A, const S* W, double hd, const S* dY, S* gz, S* gy, S* dA,
             const S* hs, const S* Z, S* dhs, StepDone step_done) {
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
    step_done(n);
  }
}

}  // namespace
