// =====================================================================================================
// coRNN (002 eq. 2.3), z first then y = y + h z_new; damping explicit ("imex") or implicit ("imex-implicit").
//   A (B·T, d): on entry a = V u + b, on exit s = 𝒲 z + W y + a (in place). Wct = 𝒲^T, Wyt = W^T.
//   F = tanh(s) − γ y;  explicit z' = z + h (F − ε z);  implicit z' = (z + h F) / (1 + h ε);  y' = y + h z'
// =====================================================================================================
namespace {

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

// z0 y0 Z Y (the states) are read only for dhs (B, T; null: not wanted), the gradients of the steps' lengths;
// step_done: as lem_bwd.
template <typename S, typename StepDone>
void cornn_bwd(i64 B, i64 T, i64 d, const S* A, const S* Wc, const S* Wy, double hd, double gd, double ed,
               int implicit, const S* dY, S* gz, S* gy, S* dA, const S* hs, const S* z0, const S* y0, const S* Z,
               const S* Y, S* dhs, StepDone step_done) {
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
    step_done(n);
  }
}

}  // namespace
