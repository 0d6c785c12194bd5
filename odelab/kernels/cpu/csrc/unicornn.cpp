// =====================================================================================================
// UnICORNN layer (002 eq. 3.6), symplectic Euler with the per-neuron step h σ̂(c) -- diagonal, no products.
//   a = V u + b (B·T, d), k = σ̂(c), s = w y + a:  z' = z + h (−k (tanh(s) + α y)),  y' = y + h (k z')
// =====================================================================================================
namespace {

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

}  // namespace
