// =====================================================================================================
// GRU-ODE (004 eq. 54) + Euler, torch's reset-after convention:
//   A (B·T, 3d) = [a_r | a_f | a_u] on entry; on exit [s_r | s_f | s_u] with s_r = W_r h + a_r,
//   s_f = W_f h + a_f, s_u = a_u + σ(s_r) ⊙ c, c = W_u h + b_hu (stored in C (B·T, d)).
//   h' = h + Δ (σ(s_f) tanh(s_u) − σ(s_f) h)
// =====================================================================================================
namespace {

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

template <typename S, typename StepDone>  // dhs (B, T) or null, step_done: as lem_bwd
void gru_bwd(i64 B, i64 T, i64 d, const S* A, const S* C, const S* h0, const S* Wrf, const S* Wu, double hd,
             const S* H, const S* dY, S* gh, S* dA, S* dC, const S* hs, S* dhs, StepDone step_done) {
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
    step_done(n);
  }
}

}  // namespace
