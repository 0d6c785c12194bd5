// =====================================================================================================
// Gated delay cells (Erichson et al., eqs. 12, 14) + Euler, delayed state h_{n−m} from the stored states
// (zero history; m = 0 reads the current state). State k: k = 0 is h0, k >= 1 is H[:, k−1].
//   Delay GRU (kind 0): A = [a_c | a_g] -> s_c = W1 h + W2 h_{n−m} + a_c, s_g = W3 h + a_g;
//       h' = h + Δ (σ(s_g) tanh(s_c) − σ(s_g) h)
//   τ-GRU (kind 1):    A = [a_u | a_z | a_g | a_a] -> s_u = W1 h + a_u, s_z = W2 h_{n−m} + a_z, s_g = W3 h + a_g,
//       s_a = W4 h + a_a;  target = β tanh(s_u) + α σ(s_a) tanh(s_z);  h' = h + Δ (σ(s_g) target − σ(s_g) h)
//   Wht = weight_h^T (d x kd: [W1; W3] or [W1; W3; W4]), W2t = W2^T.
// =====================================================================================================
// The backward's ring of pending delayed gradients: state k's arrives at step k + m and is read at step k − 1,
// so m + 2 slots (no more than the T + 1 states) hold every one that is still to be read.
namespace {

inline i64 pending_slots(i64 T, i64 m) { return std::min(m + 2, T + 1); }

template <typename S>
inline const S* delay_state(const S* H, const S* h0, i64 k, i64 d, i64 ls, i64* ld) {
  if (k < 0) return nullptr;
  if (k == 0) { *ld = d; return h0; }
  *ld = ls; return H + (k - 1) * d;
}

template <typename S>
void tau_step(i64 d, S h, S alpha, S beta, const S* __restrict__ sb, const S* __restrict__ x, S* __restrict__ o) {
  for (i64 j = 0; j < d; ++j) {
    const S u = tanh_(sb[j]), z = tanh_(sb[d + j]), g = sigmoid(sb[2 * d + j]), wa = sigmoid(sb[3 * d + j]);
    const S target = beta * u + alpha * (wa * z);
    o[j] = x[j] + h * (g * target - g * x[j]);
  }
}
template <typename S>
void tau_step_bwd(i64 d, S h, S alpha, S beta, const S* __restrict__ sb, const S* __restrict__ x,
                  S* __restrict__ ds, S* __restrict__ g) {
  for (i64 j = 0; j < d; ++j) {
    const S u = tanh_(sb[j]), z = tanh_(sb[d + j]), gg = sigmoid(sb[2 * d + j]), wa = sigmoid(sb[3 * d + j]);
    const S target = beta * u + alpha * (wa * z);
    const S G0 = g[j];
    const S dt = G0 * h * gg;                                         // dL/dtarget
    ds[j] = dt * beta * (S(1) - u * u);
    ds[d + j] = dt * alpha * wa * (S(1) - z * z);
    ds[2 * d + j] = G0 * h * (target - x[j]) * gg * (S(1) - gg);
    ds[3 * d + j] = dt * alpha * z * wa * (S(1) - wa);
    g[j] = G0 - h * gg * G0;
  }
}

// State dropout: K (B, T, 2, d) or null, the factors of step n: state n (the one it starts from) times K[:, n, 0],
// the delayed state it reads times K[:, n, 1]. dropped() writes them into R (2 x B x d) and points hp, hq there.
template <typename S>
void dropped(i64 B, i64 T, i64 d, i64 n, const S* K, S* R, const S** hp, i64* lp, const S** hq, i64* lq) {
  const i64 lk = T * 2 * d;
  for (i64 b = 0; b < B; ++b) {
    const S* __restrict__ k = K + b * lk + n * 2 * d; const S* __restrict__ x = *hp + b * *lp;
    S* __restrict__ r = R + b * d;
    for (i64 j = 0; j < d; ++j) r[j] = k[j] * x[j];
    if (*hq) {
      const S* __restrict__ q = *hq + b * *lq; S* __restrict__ rq = R + (B + b) * d;
      for (i64 j = 0; j < d; ++j) rq[j] = k[d + j] * q[j];
    }
  }
  *hp = R; *lp = d;
  if (*hq) { *hq = R + B * d; *lq = d; }
}

// τ-GRU with branches switched off (kind 2, §5's ablations: alpha = 0 drops z, a and W2; beta = 0 drops u;
// weighting = False drops a; gating = False drops g): e = the encoding block of (u, z, g, a) in A, w = the
// weight_h block of (u, −, g, a), −1 where absent (u, z absent: 0; g, a absent: 1); ne blocks a step, nh in weight_h.
struct TauLayout { i64 ne, nh, e[4], w[4]; };
// the values of a step's pre-activations: 2d (Delay GRU), 4d (τ-GRU), ne d (the ablations)
inline i64 gate_width(int kind, i64 d, const TauLayout& L) { return kind == 2 ? L.ne * d : kind ? 4 * d : 2 * d; }

template <typename S>
void tau_ablated_step(i64 d, S h, S alpha, S beta, const TauLayout& L, const S* __restrict__ sb,
                      const S* __restrict__ x, S* __restrict__ o) {
  for (i64 j = 0; j < d; ++j) {
    const S u = L.e[0] >= 0 ? tanh_(sb[L.e[0] * d + j]) : S(0), z = L.e[1] >= 0 ? tanh_(sb[L.e[1] * d + j]) : S(0);
    const S g = L.e[2] >= 0 ? sigmoid(sb[L.e[2] * d + j]) : S(1);
    const S wa = L.e[3] >= 0 ? sigmoid(sb[L.e[3] * d + j]) : S(1);
    const S target = beta * u + alpha * (wa * z);
    o[j] = x[j] + h * (g * target - g * x[j]);
  }
}
template <typename S>
void tau_ablated_step_bwd(i64 d, S h, S alpha, S beta, const TauLayout& L, const S* __restrict__ sb,
                          const S* __restrict__ x, S* __restrict__ ds, S* __restrict__ g) {
  for (i64 j = 0; j < d; ++j) {
    const S u = L.e[0] >= 0 ? tanh_(sb[L.e[0] * d + j]) : S(0), z = L.e[1] >= 0 ? tanh_(sb[L.e[1] * d + j]) : S(0);
    const S gg = L.e[2] >= 0 ? sigmoid(sb[L.e[2] * d + j]) : S(1);
    const S wa = L.e[3] >= 0 ? sigmoid(sb[L.e[3] * d + j]) : S(1);
    const S target = beta * u + alpha * (wa * z);
    const S G0 = g[j], dt = G0 * h * gg;                               // dt = dL/dtarget
    if (L.e[0] >= 0) ds[L.e[0] * d + j] = dt * beta * (S(1) - u * u);
    if (L.e[1] >= 0) ds[L.e[1] * d + j] = dt * alpha * wa * (S(1) - z * z);
    if (L.e[2] >= 0) ds[L.e[2] * d + j] = G0 * h * (target - x[j]) * gg * (S(1) - gg);
    if (L.e[3] >= 0) ds[L.e[3] * d + j] = dt * alpha * z * wa * (S(1) - wa);
    g[j] = G0 - h * gg * G0;
  }
}

// Steps n0 … n0 + TA − 1 of the T (A holds their TA encodings: the whole sequence, or a chunk of it when no
// backward follows); H (B, T, d) holds the states before n0; K as dropped() (steps indexed from 0, not n0).
template <typename S>
void gdelay_fwd(int kind, i64 B, i64 T, i64 d, i64 m, i64 n0, i64 TA, S* A, const S* h0, const S* Wht, const S* W2t,
                double hd, double al, double be, S* H, const S* K, const TauLayout& L) {
  const S h = S(hd), alpha = S(al), beta = S(be);
  const i64 ls = T * d, w = gate_width(kind, d, L), la = TA * w;
  std::vector<S> R(K ? 2 * B * d : 0);
  for (i64 n = n0; n < n0 + TA; ++n) {
    i64 lp = d, lq = d;
    const S* hp = delay_state(H, h0, n, d, ls, &lp);
    const S* hq = delay_state(H, h0, n - m, d, ls, &lq);
    if (K) dropped(B, T, d, n, K, R.data(), &hp, &lp, &hq, &lq);
    S* a = A + (n - n0) * w;
    const bool next = n + 1 < n0 + TA;  // the next step's rows (a sequence apart) asked for during this one's
    if (kind == 0) {
      mm(B, 2 * d, d, hp, lp, Wht, 2 * d, S(1), a, la);                  // [s_c s_g] += h [W1; W3]^T
      if (hq) mm(B, d, d, hq, lq, W2t, d, S(1), a, la);                  // s_c += h_{n−m} W2^T
      for (i64 b = 0; b < B; ++b) {
        relax_fwd(d, h, a + b * la + d, a + b * la, hp + b * lp, H + n * d + b * ls);
        if (next) prefetch(a + w + b * la, w);
      }
    } else if (kind == 1) {
      mm(B, d, d, hp, lp, Wht, 3 * d, S(1), a, la);                      // s_u += h W1^T
      mm(B, 2 * d, d, hp, lp, Wht + d, 3 * d, S(1), a + 2 * d, la);      // [s_g s_a] += h [W3; W4]^T
      if (hq) mm(B, d, d, hq, lq, W2t, d, S(1), a + d, la);              // s_z += h_{n−m} W2^T
      for (i64 b = 0; b < B; ++b) {
        tau_step(d, h, alpha, beta, a + b * la, hp + b * lp, H + n * d + b * ls);
        if (next) prefetch(a + w + b * la, w);
      }
    } else {
      for (int r : {0, 2, 3})                                            // s_r += h W_r^T, the present maps of h
        if (L.e[r] >= 0) mm(B, d, d, hp, lp, Wht + L.w[r] * d, L.nh * d, S(1), a + L.e[r] * d, la);
      if (hq && L.e[1] >= 0) mm(B, d, d, hq, lq, W2t, d, S(1), a + L.e[1] * d, la);
      for (i64 b = 0; b < B; ++b)
        tau_ablated_step(d, h, alpha, beta, L, a + b * la, hp + b * lp, H + n * d + b * ls);
    }
  }
}

// The weight gradients' terms of a step (weights.cpp) without state dropout: weight_h's maps of the state the step
// starts from, into the rows of dWh (d x d a map, in weight_h's order), and W2's of the delayed state h_{n−m}, into
// dW2. dA (B, T, w), the states h0 (B, d) and H (B, T, d); dWh, dW2 null: not wanted.
template <typename S>
void delay_weight_terms(int kind, i64 d, i64 m, const TauLayout& L, const S* dA, const S* H, const S* h0,
                        S* dWh, S* dW2, WeightTerm<S> (&terms)[4]) {
  const i64 w = gate_width(kind, d, L);
  const auto term = [&](i64 block, i64 blocks, i64 lag, S* O) {  // encoding blocks [block, block + blocks)
    return WeightTerm<S>{dA, w, block * d, blocks * d, H, h0, lag, O};
  };
  for (auto& t : terms) t = term(0, 0, 0, nullptr);
  if (kind == 0) {                              // [s_c s_g] from [W1; W3], s_c from W2
    terms[0] = term(0, 2, 0, dWh);
    terms[1] = term(0, 1, m, dW2);
  } else if (kind == 1) {                       // s_u from W1, [s_g s_a] from [W3; W4], s_z from W2
    terms[0] = term(0, 1, 0, dWh);
    terms[1] = term(2, 2, 0, at(dWh, d * d));
    terms[2] = term(1, 1, m, dW2);
  } else {
    for (int r : {0, 2, 3})
      if (L.w[r] >= 0) terms[r] = term(L.e[r], 1, 0, at(dWh, L.w[r] * d * d));
    if (L.e[1] >= 0) terms[1] = term(L.e[1], 1, m, dW2);
  }
}

// Pend (pending_slots(T, m) x B x d, zeroed): a ring of the gradients that later steps' delayed reads send back to
// the states still to be reached. K as gdelay_fwd: the step's gradient to its dropped start (and delayed read) is
// multiplied by the same factor on its way to the state. step_done(n): called once step n's rows of dA are written
// (weights_after_step).
template <typename S, typename StepDone>
void gdelay_bwd(int kind, i64 B, i64 T, i64 d, i64 m, const S* A, const S* h0, const S* Wh, const S* W2, double hd,
                double al, double be, const S* H, const S* dY, S* gh, S* dA, S* Pend, const S* K, const TauLayout& L,
                StepDone step_done) {
  const S h = S(hd), alpha = S(al), beta = S(be);
  const i64 ls = T * d, w = gate_width(kind, d, L), la = T * w, R = pending_slots(T, m),
            lk = T * 2 * d;
  const bool reads_delayed = kind != 2 || L.e[1] >= 0;
  std::vector<S> G(B * d), D(K ? 2 * B * d : 0), Q(K ? B * d : 0);
  for (i64 n = T - 1; n >= 0; --n) {
    i64 lp = d, lq = d;
    const S* hp = delay_state(H, h0, n, d, ls, &lp);
    const S* hq = nullptr;
    if (K) dropped(B, T, d, n, K, D.data(), &hp, &lp, &hq, &lq);  // the start only: the delayed read is not needed
    // the delayed read's gradient: straight into its state's slot, or through Q and its factor
    S* delayed = reads_delayed && n - m >= 0 ? (K ? Q.data() : Pend + (n - m) % R * B * d) : nullptr;
    const S keep_sum = K ? S(0) : S(1);
    const S* a = A + n * w; S* da = dA + n * w;
    // gh: dL/d state_{n+1} = what came back + the output gradient + the delayed reads of it (its slot is then
    // free for state n − m − 1, which step n − 1 writes)
    add_step(B, d, gh, dY, n, ls);
    S* pend = Pend + (n + 1) % R * B * d;
    add_step(B, d, gh, pend, 0, d);
    std::fill(pend, pend + B * d, S(0));
    // the previous step's rows (a sequence apart), asked for during this one's: pre-activations, their gradients, dY
    const auto ahead = [&](i64 b) {
      if (n == 0) return;
      prefetch(a - w + b * la, w); prefetch(da - w + b * la, w);
      if (dY) prefetch(dY + b * ls + (n - 1) * d, d);
    };
    if (kind == 0) {
      for (i64 b = 0; b < B; ++b) {
        relax_bwd(d, h, a + b * la + d, a + b * la, hp + b * lp, gh + b * d, G.data() + b * d, da + b * la + d,
                  da + b * la);
        ahead(b);
      }
      std::memcpy(gh, G.data(), B * d * sizeof(S));
      mm(B, d, 2 * d, da, la, Wh, d, S(1), gh, d);                       // += [ds_c ds_g] [W1; W3]
      if (delayed) mm(B, d, d, da, la, W2, d, keep_sum, delayed, d);
    } else if (kind == 1) {
      for (i64 b = 0; b < B; ++b) {
        tau_step_bwd(d, h, alpha, beta, a + b * la, hp + b * lp, da + b * la, gh + b * d);
        ahead(b);
      }
      mm(B, d, d, da, la, Wh, d, S(1), gh, d);                           // += ds_u W1
      mm(B, d, 2 * d, da + 2 * d, la, Wh + d * d, d, S(1), gh, d);       // += [ds_g ds_a] [W3; W4]
      if (delayed) mm(B, d, d, da + d, la, W2, d, keep_sum, delayed, d);
    } else {
      for (i64 b = 0; b < B; ++b)
        tau_ablated_step_bwd(d, h, alpha, beta, L, a + b * la, hp + b * lp, da + b * la, gh + b * d);
      for (int r : {0, 2, 3})                                            // += ds_r W_r
        if (L.e[r] >= 0) mm(B, d, d, da + L.e[r] * d, la, Wh + L.w[r] * d * d, d, S(1), gh, d);
      if (delayed) mm(B, d, d, da + L.e[1] * d, la, W2, d, keep_sum, delayed, d);
    }
    if (K) {  // gh was dL/d(start) and Q dL/d(delayed read): times their factors, to the states
      S* pend = delayed ? Pend + (n - m) % R * B * d : nullptr;
      for (i64 b = 0; b < B; ++b) {
        const S* __restrict__ k = K + b * lk + n * 2 * d; S* __restrict__ g = gh + b * d;
        for (i64 j = 0; j < d; ++j) g[j] *= k[j];
        if (pend) {
          const S* __restrict__ q = Q.data() + b * d; S* __restrict__ p = pend + b * d;
          for (i64 j = 0; j < d; ++j) p[j] += k[d + j] * q[j];
        }
      }
    }
    step_done(n);
  }
  for (i64 b = 0; b < B; ++b) for (i64 j = 0; j < d; ++j) gh[b * d + j] += Pend[b * d + j];  // state 0 = h0
}

}  // namespace
