// =====================================================================================================
// Liquid cells (004 eqs. 1-5): one chemical synapse from every presynaptic y_j, y = [h, x] (m neurons, then the
// n inputs), to every neuron i:
//   f_i = Σ_j g_ji σ(a_ji y_j + b_ji) + g_li,   u_i = Σ_j k_ji σ(a_ji y_j + b_ji) + g_li,
// and for LRC w_i = Σ_j o_ji y_j + p_i, whose input part w_in = O_x^T x + p (B·T, m) comes from torch. The L
// sub-steps s = n L + q of sample n (input x_n) store their conductances [f | u | w] in C (B·T·L, w = 2m or 3m);
// H (B, T, m) holds the sample states (sub-steps L-1, 2L-1, ...). Update of h (δ = the sub-step):
//   kind 0, LTC  + semi-implicit Euler:  h' = (h + δ u e_l) / (1 + δ f)
//   kind 1, STC  + semi-implicit Euler:  h' = (h + δ tanh(u) e_l) / (1 + δ σ(f))
//   kind 2/3, LRC (asymmetric / symmetric elastance) + Euler:
//            h' = h + δ (ε tanh(u) e_l − ε σ(f) h),  ε = σ(w)  or  σ(w + k) − σ(w − k)
// Synapse matrices G, Aa, Bb, K: (m + n) x m, presynaptic index first (the neurons' rows, then the inputs').
//
// The synapses (B·m² sigmoids a sub-step from the neurons, the whole cost) run over chunks of LANES
// postsynaptic neurons i, one float vector register, with the four matrices packed chunk-major and zero-padded
// past m (pack_synapses): the forward holds ROWS batch rows' f and u of one chunk in registers while it runs over
// the presynaptic j; the backward holds a chunk's four parameter-gradient sums in registers while it runs over
// the batch, and adds them into the double accumulators once a sub-step. Padded lanes see a = b = g = k = 0 and
// zero gradients, so they add nothing. The inputs' synapses are summed once a sample (shared by its sub-steps).
// =====================================================================================================
namespace {

#if defined(__AVX512F__)
constexpr i64 LANES = 16;
#else
constexpr i64 LANES = 8;
#endif
constexpr int ROWS = 4;
constexpr float OPENING_SCALE = -0x1.715476p+4f;  // −16 log2(e): opening16's parameters

#if defined(__AVX512F__)
// The openings σ(a y + b) of 16 synapses (float32), with fewer multiply-adds than sigmoid() (the synapse loops are
// bound by those ports). From a' = −16 log2(e) a and b' = −16 log2(e) b, packed beside a and b:
// w = a' y + b' = 16 log2(e^{−(a y + b)}), clamped to a y + b in [−80, 80] as exp_fast clamps (no opening below
// e^{-80}, none subnormal; NaN passes through);
// w = 16 k + j + f with |f| ≤ 1/2 (the rounding to integers by adding 1.5 · 2^23), and
// e^{−(a y + b)} = 2^k · 2^{j/16} · 2^{f/16}: 2^{j/16} from a 16-entry table in one register (vpermps), 2^k added to
// its exponent bits, 2^{f/16} to third order (error 1e-8 relative); then 1 / (1 + e). Error: about 1 ulp of 1, and
// relative where σ is small about |a y + b| times float32's rounding (as rounding a y + b to float32 gives).
inline __m512 opening16(__m512 as, __m512 y, __m512 bs) {
  const __m512 one = _mm512_set1_ps(1.0f), round = _mm512_set1_ps(12582912.0f);
  const __m512 powers = _mm512_setr_ps(0x1.000000p+0f, 0x1.0b5586p+0f, 0x1.172b84p+0f, 0x1.2387a6p+0f,
                                       0x1.306fe0p+0f, 0x1.3dea64p+0f, 0x1.4bfdaep+0f, 0x1.5ab07ep+0f,
                                       0x1.6a09e6p+0f, 0x1.7a1148p+0f, 0x1.8ace54p+0f, 0x1.9c4918p+0f,
                                       0x1.ae89fap+0f, 0x1.c199bep+0f, 0x1.d5818ep+0f, 0x1.ea4afap+0f);  // 2^{j/16}
  __m512 w = _mm512_fmadd_ps(as, y, bs);
  w = _mm512_min_ps(_mm512_set1_ps(OPENING_SCALE * -80.0f), _mm512_max_ps(_mm512_set1_ps(OPENING_SCALE * 80.0f), w));
  const __m512 u = _mm512_add_ps(w, round);  // 16 k + j in the low bits
  const __m512 f = _mm512_sub_ps(w, _mm512_sub_ps(u, round));  // exact
  __m512 e = _mm512_fmadd_ps(_mm512_set1_ps(0x1.c6b08ep-17f), f, _mm512_set1_ps(0x1.ebfbe0p-11f));  // (ln2/16)^n / n!
  e = _mm512_fmadd_ps(_mm512_fmadd_ps(e, f, _mm512_set1_ps(0x1.62e430p-5f)), f, one);
  const __m512i bits = _mm512_castps_si512(u);
  const __m512 scale = _mm512_castsi512_ps(_mm512_add_epi32(
      _mm512_castps_si512(_mm512_permutexvar_ps(bits, powers)), _mm512_slli_epi32(_mm512_srai_epi32(bits, 4), 23)));
  return _mm512_div_ps(one, _mm512_fmadd_ps(e, scale, one));
}
#endif

// Whether the synapse loops of S run on opening16 (float32 on AVX-512), and the fields packed per synapse
#if defined(__AVX512F__)
template <typename S> constexpr bool VECTOR_OPENINGS = std::is_same<S, float>::value;
#else
template <typename S> constexpr bool VECTOR_OPENINGS = false;
#endif
template <typename S> constexpr i64 FIELDS = VECTOR_OPENINGS<S> ? 5 : 4;

// P[c][j][q][l] = (a, b, g, k)[q] of the synapse j -> c LANES + l, for the J rows j of the (J x m) matrices
// (0 past m); for opening16 (a', b', g, k, a) with a' = OPENING_SCALE a, b' = OPENING_SCALE b
template <typename S>
std::vector<S> pack_synapses(i64 J, i64 m, const S* G, const S* Aa, const S* Bb, const S* K) {
  const i64 nc = (m + LANES - 1) / LANES, q = FIELDS<S> * LANES;
  const S scale = VECTOR_OPENINGS<S> ? S(OPENING_SCALE) : S(1);
  std::vector<S> P(nc * J * q, S(0));
  for (i64 c = 0; c < nc; ++c)
    for (i64 j = 0; j < J; ++j) {
      S* p = P.data() + (c * J + j) * q;
      for (i64 l = 0; l < LANES && c * LANES + l < m; ++l) {
        const i64 ji = j * m + c * LANES + l;
        p[l] = scale * Aa[ji]; p[LANES + l] = scale * Bb[ji]; p[2 * LANES + l] = G[ji]; p[3 * LANES + l] = K[ji];
        if (FIELDS<S> == 5) p[4 * LANES + l] = Aa[ji];
      }
    }
  return P;
}

// R rows (stride ly of y, lf of the conductances f; u = f + m), chunk c of the J presynaptic rows packed in P:
// f_i += Σ_j g_ji σ(a_ji y_j + b_ji), u_i += Σ_j k_ji σ(a_ji y_j + b_ji), in the order j = 0, 1, ...
template <typename S, int R>
void synapse_rows_fwd(i64 J, i64 m, i64 c, const S* __restrict__ P, const S* __restrict__ y, i64 ly,
                      S* __restrict__ f, i64 lf) {
  const i64 i0 = c * LANES, len = std::min(LANES, m - i0);
#if defined(__AVX512F__)
  if constexpr (VECTOR_OPENINGS<S>) {
    const __mmask16 lanes = (__mmask16)((1u << len) - 1u);
    __m512 F[R], U[R];
    for (int r = 0; r < R; ++r) {
      F[r] = _mm512_maskz_loadu_ps(lanes, f + r * lf + i0);
      U[r] = _mm512_maskz_loadu_ps(lanes, f + r * lf + m + i0);
    }
    const float* __restrict__ p = P + c * J * FIELDS<S> * LANES;
    for (i64 j = 0; j < J; ++j, p += FIELDS<S> * LANES) {
      const __m512 pa = _mm512_loadu_ps(p), pb = _mm512_loadu_ps(p + LANES), pg = _mm512_loadu_ps(p + 2 * LANES),
                   pk = _mm512_loadu_ps(p + 3 * LANES);
      for (int r = 0; r < R; ++r) {
        const __m512 o = opening16(pa, _mm512_set1_ps(y[r * ly + j]), pb);
        F[r] = _mm512_fmadd_ps(pg, o, F[r]);
        U[r] = _mm512_fmadd_ps(pk, o, U[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(f + r * lf + i0, lanes, F[r]);
      _mm512_mask_storeu_ps(f + r * lf + m + i0, lanes, U[r]);
    }
    return;
  }
#endif
  S F[R][LANES], U[R][LANES];
  for (int r = 0; r < R; ++r)
    for (i64 l = 0; l < LANES; ++l) {
      F[r][l] = l < len ? f[r * lf + i0 + l] : S(0);
      U[r][l] = l < len ? f[r * lf + m + i0 + l] : S(0);
    }
  const S* __restrict__ p = P + c * J * FIELDS<S> * LANES;
  for (i64 j = 0; j < J; ++j, p += FIELDS<S> * LANES)
    for (int r = 0; r < R; ++r) {
      const S yj = y[r * ly + j];
      for (i64 l = 0; l < LANES; ++l) {
        const S o = sigmoid(p[l] * yj + p[LANES + l]);
        F[r][l] += p[2 * LANES + l] * o;
        U[r][l] += p[3 * LANES + l] * o;
      }
    }
  for (int r = 0; r < R; ++r)
    for (i64 l = 0; l < len; ++l) { f[r * lf + i0 + l] = F[r][l]; f[r * lf + m + i0 + l] = U[r][l]; }
}

// Synapses a sub-step from which the loops split between OpenMP threads (below, a fork and join would cost
// more than the work; the split never changes a result: every sum stays in one thread, in the same order).
constexpr i64 PARALLEL_SYNAPSES = 1 << 15;

// The B rows of y (stride ly) through the J presynaptic rows packed in P, into f, u (stride lf): tasks of
// (chunk, ROWS batch rows), chunk-major, shared between the threads.
template <typename S>
void synapses_fwd(i64 B, i64 J, i64 m, const S* P, const S* y, i64 ly, S* f, i64 lf, int threads) {
  if (J == 0) return;
  const i64 blocks = (B + ROWS - 1) / ROWS, tasks = (m + LANES - 1) / LANES * blocks;
#pragma omp parallel for num_threads(threads) if (threads > 1 && B * J * m >= PARALLEL_SYNAPSES) schedule(static)
  for (i64 t = 0; t < tasks; ++t) {
    const i64 c = t / blocks, b0 = t % blocks * ROWS;
    if (b0 + ROWS <= B) synapse_rows_fwd<S, ROWS>(J, m, c, P, y + b0 * ly, ly, f + b0 * lf, lf);
    else for (i64 b = b0; b < B; ++b) synapse_rows_fwd<S, 1>(J, m, c, P, y + b * ly, ly, f + b * lf, lf);
  }
}

// One batch row's update h -> o from its conductances f, u (and w): the forward's, and the backward's recomputation
// of a sample's sub-step states (the same code, the same bits).
template <typename S>
void liquid_update(int kind, i64 m, S h, const S* __restrict__ f, const S* __restrict__ u, const S* __restrict__ wv,
                   const S* __restrict__ x, const S* __restrict__ el, const S* __restrict__ ksh, S* __restrict__ o) {
  if (kind == 0) for (i64 i = 0; i < m; ++i) o[i] = (x[i] + h * (u[i] * el[i])) / (S(1) + h * f[i]);
  else if (kind == 1)
    for (i64 i = 0; i < m; ++i) o[i] = (x[i] + h * (tanh_(u[i]) * el[i])) / (S(1) + h * sigmoid(f[i]));
  else for (i64 i = 0; i < m; ++i) {
    const S e = kind == 2 ? sigmoid(wv[i]) : sigmoid(wv[i] + ksh[i]) - sigmoid(wv[i] - ksh[i]);
    o[i] = x[i] + h * (e * tanh_(u[i]) * el[i] - e * sigmoid(f[i]) * x[i]);
  }
}

// X (B, T, n); gl: g_l (m); Win (B·T, m): LRC's input part of w, else null. H (B, T, m) receives the sample states;
// a sample's other sub-steps run in scratch rows. C: every sub-step's conductances, stored for the backward (null
// when there is none, e.g. under torch.no_grad()).
template <typename S>
void liquid_fwd(int kind, i64 B, i64 T, i64 m, i64 n, i64 L, int threads, const S* X, const S* h0, const S* G,
                const S* Aa, const S* Bb, const S* K, const S* gl, const S* el, const S* Oh, const S* ksh,
                const S* Win, double hd, S* C, S* H, const S* hs) {  // hs (B, T): a sample's sub-step (or null: h)
  const S h = S(hd);
  const bool store = C != nullptr;
  const i64 TS = T * L, w = kind >= 2 ? 3 * m : 2 * m, lc = store ? TS * w : w, lx = T * n, ls = T * m;
  const i64 inputs = m * m;  // offset of the inputs' rows in the synapse matrices
  const std::vector<S> P = pack_synapses(m, m, G, Aa, Bb, K);
  const std::vector<S> Pin = pack_synapses(n, m, G + inputs, Aa + inputs, Bb + inputs, K + inputs);
  std::vector<S> In(B * 2 * m);  // the sample's leak + input synapses [f_in | u_in], rows of 2m
  std::vector<S> Cs(store ? 0 : B * w), Ring(L > 1 ? 2 * B * m : 0);
  const S* hp = h0; i64 lp = m;  // the state before sub-step s: rows of stride lp
  for (i64 s = 0; s < TS; ++s) {
    const i64 ns = s / L;
    // this sub-step's state: a sample state (H) or a scratch row
    S* out = s % L == L - 1 ? H + ns * m : Ring.data() + s % 2 * B * m;
    const i64 lo = s % L == L - 1 ? ls : m;
    if (s % L == 0) {
      for (i64 b = 0; b < B; ++b)
        for (i64 i = 0; i < m; ++i) In[b * 2 * m + i] = In[b * 2 * m + m + i] = gl[i];
      synapses_fwd(B, n, m, Pin.data(), X + ns * n, lx, In.data(), 2 * m, threads);
    }
    S* a = store ? C + s * w : Cs.data();
    for (i64 b = 0; b < B; ++b) {
      std::memcpy(a + b * lc, In.data() + b * 2 * m, 2 * m * sizeof(S));
      if (kind >= 2) {
        std::memcpy(a + b * lc + 2 * m, Win + (b * T + ns) * m, m * sizeof(S));
        if (ns + 1 < T && (s + 1) % L == 0) prefetch(Win + (b * T + ns + 1) * m, m);  // the next sample's row
      }
    }
    if (kind >= 2) mm(B, m, m, hp, lp, Oh, m, S(1), a + 2 * m, lc);     // w += h O_h
    synapses_fwd(B, m, m, P.data(), hp, lp, a, lc, threads);
    for (i64 b = 0; b < B; ++b) {
      const S* f = a + b * lc;
      liquid_update(kind, m, hs ? hs[b * T + ns] : h, f, f + m, f + 2 * m, hp + b * lp, el, ksh, out + b * lo);
    }
    hp = out; lp = lo;
  }
}

#if defined(__AVX512F__)
// R batch rows of synapse_column_bwd's loop over the batch (float32, chunk c of the postsynaptic neurons; pa, pb
// opening16's a', b', a the synapses' a): the openings o, ds = (df g + du k) o (1 − o), the sums of df o, ds y, ds,
// du o, and each row's ds a (scratch).
template <bool FIRST, int R>
inline void synapse_rows_bwd16(const float* __restrict__ D, i64 ld, i64 c, i64 nc, const float* __restrict__ yT,
                               float* __restrict__ scratch, __m512 pa, __m512 pb, __m512 pg, __m512 pk, __m512 a,
                               __m512& sG, __m512& sA, __m512& sB, __m512& sK) {
  __m512 yj[R], o[R];
  for (int r = 0; r < R; ++r) { yj[r] = _mm512_set1_ps(yT[r]); o[r] = opening16(pa, yj[r], pb); }
  for (int r = 0; r < R; ++r) {
    const __m512 df = _mm512_loadu_ps(D + r * ld + c * LANES), du = _mm512_loadu_ps(D + r * ld + (nc + c) * LANES);
    const __m512 ds = _mm512_mul_ps(_mm512_fmadd_ps(du, pk, _mm512_mul_ps(df, pg)), _mm512_fnmadd_ps(o[r], o[r], o[r]));
    sG = _mm512_fmadd_ps(df, o[r], sG); sK = _mm512_fmadd_ps(du, o[r], sK);
    sA = _mm512_fmadd_ps(ds, yj[r], sA); sB = _mm512_add_ps(sB, ds);
    float* t = scratch + r * LANES;
    _mm512_storeu_ps(t, FIRST ? _mm512_mul_ps(ds, a) : _mm512_fmadd_ps(ds, a, _mm512_loadu_ps(t)));
  }
}

// The sums of the 16 rows of 16 floats at v (row-major), in order: a tree of in-lane and 128-bit shuffles (45
// instructions where 16 horizontal reductions take about 160).
inline __m512 row_sums16(const float* __restrict__ v) {
  __m512 pairs[8], quads[4], halves[2];
  for (int i = 0; i < 8; ++i) {  // rows 2i, 2i+1: [e0+e2, f0+f2, e1+e3, f1+f3] in each 128-bit lane
    const __m512 e = _mm512_loadu_ps(v + 32 * i), f = _mm512_loadu_ps(v + 32 * i + 16);
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(e, f), _mm512_unpackhi_ps(e, f));
  }
  for (int i = 0; i < 4; ++i)  // rows 4i..4i+3: each 128-bit lane q holds their sums over elements 4q..4q+3
    quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 2; ++i)  // lanes (q0 + q1, q2 + q3) of quads 2i, then of 2i + 1
    halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(halves[0], halves[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(halves[0], halves[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

// One sub-step of the synapses' backward, presynaptic row j of the J packed in P: o_ji = σ(a_ji y_j + b_ji) feeds
// f_i (weight g_ji) and u_i (weight k_ji). D (B x 2 mp, mp = nc LANES): [df | du] zero-padded; yT: y_j over the
// batch; gy (stride lg): += Σ_i ds_ji a_ji; acc: the double sums of dL/d(g, a, b, k) (J x m); scratch: B x LANES.
template <typename S>
void synapse_column_bwd(i64 B, i64 J, i64 m, i64 j, const S* __restrict__ P, const S* __restrict__ D,
                        const S* __restrict__ yT, S* __restrict__ gy, i64 lg, double* const* acc,
                        S* __restrict__ scratch) {
  const i64 nc = (m + LANES - 1) / LANES, ld = 2 * nc * LANES;
#if defined(__AVX512F__)
  if constexpr (VECTOR_OPENINGS<S>) {
    for (i64 c = 0; c < nc; ++c) {
      const float* __restrict__ p = P + (c * J + j) * FIELDS<S> * LANES;
      const __m512 pa = _mm512_loadu_ps(p), pb = _mm512_loadu_ps(p + LANES), pg = _mm512_loadu_ps(p + 2 * LANES),
                   pk = _mm512_loadu_ps(p + 3 * LANES), a = _mm512_loadu_ps(p + 4 * LANES);
      __m512 sG = _mm512_setzero_ps(), sA = sG, sB = sG, sK = sG;
      // ROWS batch rows at a time: their openings are independent chains of about 20 operations, interleaved here
      // so that the core overlaps them; the sums still take the rows in order
      // (the first chunk writes each row's ds a into scratch, the others add to it)
      const auto rows = [&](auto first) {
        constexpr bool F = decltype(first)::value;
        i64 b = 0;
        for (; b + ROWS <= B; b += ROWS)
          synapse_rows_bwd16<F, ROWS>(D + b * ld, ld, c, nc, yT + b, scratch + b * LANES, pa, pb, pg, pk, a, sG, sA,
                                      sB, sK);
        for (; b < B; ++b)
          synapse_rows_bwd16<F, 1>(D + b * ld, ld, c, nc, yT + b, scratch + b * LANES, pa, pb, pg, pk, a, sG, sA, sB,
                                   sK);
      };
      if (c == 0) rows(std::true_type{}); else rows(std::false_type{});
      alignas(64) float s4[4][LANES];
      _mm512_store_ps(s4[0], sG); _mm512_store_ps(s4[1], sA); _mm512_store_ps(s4[2], sB); _mm512_store_ps(s4[3], sK);
      const i64 i0 = c * LANES, len = std::min(LANES, m - i0);
      for (int q = 0; q < 4; ++q)
        for (i64 l = 0; l < len; ++l) acc[q][j * m + i0 + l] += double(s4[q][l]);
    }
    i64 b = 0;
    for (; b + 16 <= B; b += 16) {
      alignas(64) float sums[16];
      _mm512_store_ps(sums, row_sums16(scratch + b * LANES));
      for (int r = 0; r < 16; ++r) gy[(b + r) * lg + j] += sums[r];
    }
    for (; b < B; ++b) gy[b * lg + j] += _mm512_reduce_add_ps(_mm512_loadu_ps(scratch + b * LANES));
    return;
  }
#endif
  for (i64 k = 0; k < B * LANES; ++k) scratch[k] = S(0);
  for (i64 c = 0; c < nc; ++c) {
    const S* __restrict__ p = P + (c * J + j) * FIELDS<S> * LANES;
    S pa[LANES], pb[LANES], pg[LANES], pk[LANES], sG[LANES], sA[LANES], sB[LANES], sK[LANES];
    for (i64 l = 0; l < LANES; ++l) {
      pa[l] = p[l]; pb[l] = p[LANES + l]; pg[l] = p[2 * LANES + l]; pk[l] = p[3 * LANES + l];
      sG[l] = sA[l] = sB[l] = sK[l] = S(0);
    }
    for (i64 b = 0; b < B; ++b) {
      const S yj = yT[b];
      const S* __restrict__ df = D + b * ld + c * LANES; const S* __restrict__ du = df + nc * LANES;
      S* __restrict__ t = scratch + b * LANES;
      for (i64 l = 0; l < LANES; ++l) {
        const S o = sigmoid(pa[l] * yj + pb[l]);
        const S ds = (df[l] * pg[l] + du[l] * pk[l]) * o * (S(1) - o);
        sG[l] += df[l] * o; sK[l] += du[l] * o; sA[l] += ds * yj; sB[l] += ds;
        t[l] += ds * pa[l];
      }
    }
    const i64 i0 = c * LANES, len = std::min(LANES, m - i0);
    double *aG = acc[0] + j * m + i0, *aA = acc[1] + j * m + i0, *aB = acc[2] + j * m + i0, *aK = acc[3] + j * m + i0;
    for (i64 l = 0; l < len; ++l) { aG[l] += double(sG[l]); aA[l] += double(sA[l]); aB[l] += double(sB[l]);
                                    aK[l] += double(sK[l]); }
  }
  for (i64 b = 0; b < B; ++b) {
    S s = S(0);
    for (i64 l = 0; l < LANES; ++l) s += scratch[b * LANES + l];
    gy[b * lg + j] += s;
  }
}

// The update's backward for one batch row: go = dL/dh (through the update's explicit h) from g = dL/dh' (+ dy,
// the sample state's gradient), df, du (and dw) = dL/d(f, u, w), and the sums of dL/de_l, dL/dk_shift.
template <typename S>
void liquid_update_bwd(int kind, i64 m, S h, const S* __restrict__ f, const S* __restrict__ u,
                       const S* __restrict__ wv, const S* __restrict__ x, const S* __restrict__ hn,
                       const S* __restrict__ g, const S* __restrict__ dy, const S* __restrict__ el,
                       const S* __restrict__ ksh, S* __restrict__ go, S* __restrict__ df, S* __restrict__ du,
                       S* __restrict__ dw, double* __restrict__ aE, double* __restrict__ aS) {
  if (dy) for (i64 i = 0; i < m; ++i) go[i] = g[i] + dy[i];
  else for (i64 i = 0; i < m; ++i) go[i] = g[i];
  if (kind == 0) for (i64 i = 0; i < m; ++i) {
    const S G0 = go[i], den = S(1) + h * f[i];
    go[i] = G0 / den;
    du[i] = G0 * h * el[i] / den;
    aE[i] += double(G0 * h * u[i] / den);
    df[i] = -(G0 * hn[i] * h / den);
  } else if (kind == 1) for (i64 i = 0; i < m; ++i) {
    const S G0 = go[i], sf = sigmoid(f[i]), t = tanh_(u[i]), den = S(1) + h * sf;
    go[i] = G0 / den;
    du[i] = G0 * h * el[i] / den * (S(1) - t * t);
    aE[i] += double(G0 * h * t / den);
    df[i] = -(G0 * hn[i] * h / den) * sf * (S(1) - sf);
  } else for (i64 i = 0; i < m; ++i) {
    const S G0 = go[i], sf = sigmoid(f[i]), t = tanh_(u[i]);
    S e, de_dw, de_dk = S(0);
    if (kind == 2) { e = sigmoid(wv[i]); de_dw = e * (S(1) - e); }
    else {
      const S s1 = sigmoid(wv[i] + ksh[i]), s2 = sigmoid(wv[i] - ksh[i]);
      e = s1 - s2; de_dw = s1 * (S(1) - s1) - s2 * (S(1) - s2); de_dk = s1 * (S(1) - s1) + s2 * (S(1) - s2);
    }
    const S ge = G0 * h * (t * el[i] - sf * x[i]);
    go[i] = G0 - G0 * h * e * sf;
    du[i] = G0 * h * e * el[i] * (S(1) - t * t);
    df[i] = -(G0 * h * e * x[i]) * sf * (S(1) - sf);
    dw[i] = ge * de_dw;
    aE[i] += double(G0 * h * e * t);
    aS[i] += double(ge * de_dk);
  }
}

// Σ_i G0_i ∂h'_i/∂δ for one batch row (G0 = g + dy = dL/dh'; x the sub-step's start, hn its h'): the sub-step
// length's gradient. LTC: (u e_l − f h') / (1 + δ f); STC: (tanh(u) e_l − σ(f) h') / (1 + δ σ(f)); LRC: ε (tanh(u)
// e_l − σ(f) x).
template <typename S>
S liquid_dh(int kind, i64 m, S h, const S* __restrict__ f, const S* __restrict__ u, const S* __restrict__ wv,
            const S* __restrict__ x, const S* __restrict__ hn, const S* __restrict__ g, const S* __restrict__ dy,
            const S* __restrict__ el, const S* __restrict__ ksh) {
  S acc = S(0);
  for (i64 i = 0; i < m; ++i) {
    const S G0 = dy ? g[i] + dy[i] : g[i];
    if (kind == 0) acc += G0 * (u[i] * el[i] - f[i] * hn[i]) / (S(1) + h * f[i]);
    else if (kind == 1) {
      const S sf = sigmoid(f[i]);
      acc += G0 * (tanh_(u[i]) * el[i] - sf * hn[i]) / (S(1) + h * sf);
    } else {
      const S e = kind == 2 ? sigmoid(wv[i]) : sigmoid(wv[i] + ksh[i]) - sigmoid(wv[i] - ksh[i]);
      acc += G0 * e * (tanh_(u[i]) * el[i] - sigmoid(f[i]) * x[i]);
    }
  }
  return acc;
}

// H (B, T, m): the sample states; a sample's other sub-step states are recomputed from its first state and C.
// gh: in dL/dh_T, out dL/dh_0. dY (B, T, m; or null): the gradients of the sample states (sub-steps L-1, 2L-1,
// ...). dX (B, T, n), zeroed: dL/dx. dG, dAa, dBb, dK ((m + n) x m), dgl, del, dksh (m): outputs, accumulated in
// double over sub-steps (each sub-step's batch sum in S first). dOh (m x m, zeroed; or null): LRC's
// dL/dO_h = Σ h^T dL/dw; dWin (B·T, m), zeroed (LRC; else null): dL/dw summed over each sample's sub-steps.
// dhs (B, T), zeroed, or null: the gradients of the samples' sub-step lengths hs, summed over their sub-steps.
template <typename S>
void liquid_bwd(int kind, i64 B, i64 T, i64 m, i64 n, i64 L, int threads, const S* X, const S* C, const S* h0,
                const S* G, const S* Aa, const S* Bb, const S* K, const S* el, const S* OhT, const S* ksh, double hd,
                const S* H, const S* dY, S* gh, S* dX, S* dG, S* dAa, S* dBb, S* dK, S* dgl, S* del, S* dksh, S* dOh,
                S* dWin, const S* hs, S* dhs) {
  const S h = S(hd);
  const i64 TS = T * L, w = kind >= 2 ? 3 * m : 2 * m, lc = TS * w, ly = T * m, lx = T * n;
  const i64 J = m + n, inputs = m * m /* the inputs' rows */, nc = (m + LANES - 1) / LANES, mp = nc * LANES;
  const std::vector<S> P = pack_synapses(m, m, G, Aa, Bb, K);
  const std::vector<S> Pin = pack_synapses(n, m, G + inputs, Aa + inputs, Bb + inputs, K + inputs);
  std::vector<double> aG(J * m, 0.0), aA(J * m, 0.0), aB(J * m, 0.0), aK(J * m, 0.0), aL(m, 0.0), aE(m, 0.0),
      aS(m, 0.0);
  double* const acc[4] = {aG.data(), aA.data(), aB.data(), aK.data()};
  double* const acc_in[4] = {aG.data() + inputs, aA.data() + inputs, aB.data() + inputs, aK.data() + inputs};
  std::vector<S> Gn(B * m), D(B * 2 * mp, S(0)), Dw(kind >= 2 ? B * m : 0), XT(m * B), XinT(n * B);
  // the input synapses' openings are a sample's, held over its sub-steps, and their backward is linear in [df | du]:
  // it runs once a sample, on the sample's sum of D (Dsum; D itself with one sub-step a sample)
  std::vector<S> Dsum(L > 1 ? B * 2 * mp : 0, S(0));
  const S* Din = L > 1 ? Dsum.data() : D.data();
  std::vector<S> Hs((L + 1) * B * m);  // the current sample's states before its sub-steps and after each
  for (i64 s = TS - 1; s >= 0; --s) {
    const i64 ns = s / L, q = s % L;
    if (q == L - 1) {  // a new sample: its sub-step states from its first state and the stored conductances
      const S* first = ns ? H + (ns - 1) * m : h0; const i64 lf = ns ? ly : m;
      for (i64 b = 0; b < B; ++b) std::memcpy(Hs.data() + b * m, first + b * lf, m * sizeof(S));
      for (i64 r = 0; r + 1 < L; ++r)
        for (i64 b = 0; b < B; ++b) {
          const S* f = C + (ns * L + r) * w + b * lc;
          liquid_update(kind, m, hs ? hs[b * T + ns] : h, f, f + m, f + 2 * m, Hs.data() + (r * B + b) * m, el, ksh,
                        Hs.data() + ((r + 1) * B + b) * m);
        }
      for (i64 b = 0; b < B; ++b) std::memcpy(Hs.data() + (L * B + b) * m, H + ns * m + b * ly, m * sizeof(S));
    }
    const S* a = C + s * w;
    for (i64 b = 0; b < B; ++b) {
      const S* __restrict__ f = a + b * lc; const S* __restrict__ u = f + m; const S* __restrict__ wv = f + 2 * m;
      const S* __restrict__ x = Hs.data() + (q * B + b) * m; const S* __restrict__ hn = x + B * m;
      const S* __restrict__ dy = dY && q == L - 1 ? dY + b * ly + ns * m : nullptr;
      if (s > 1) prefetch(f - w, w);  // the next (earlier) sub-step's conductances
      if (q == 0 && ns > 1) prefetch(H + (ns - 2) * m + b * ly, m);  // the next sample's first state
      S* __restrict__ df = D.data() + b * 2 * mp; S* __restrict__ du = df + mp;
      S* __restrict__ dw = kind >= 2 ? Dw.data() + b * m : nullptr;
      S* __restrict__ g = gh + b * m; S* __restrict__ go = Gn.data() + b * m;
      if (dhs) dhs[b * T + ns] += liquid_dh(kind, m, hs[b * T + ns], f, u, wv, x, hn, g, dy, el, ksh);
      liquid_update_bwd(kind, m, hs ? hs[b * T + ns] : h, f, u, wv, x, hn, g, dy, el, ksh, go, df, du, dw, aE.data(),
                        aS.data());
      for (i64 i = 0; i < m; ++i) aL[i] += double(df[i] + du[i]);
      if (kind >= 2) {
        S* __restrict__ gw = dWin + (b * T + ns) * m;
        for (i64 i = 0; i < m; ++i) gw[i] += dw[i];
        if (ns > 0 && s % L == 0) prefetch(gw - m, m);
      }
      for (i64 j = 0; j < m; ++j) XT[j * B + b] = x[j];
      if (q == 0) for (i64 j = 0; j < n; ++j) XinT[j * B + b] = X[b * lx + ns * n + j];
    }
    if (L > 1) for (i64 k = 0; k < B * 2 * mp; ++k) Dsum[k] += D[k];
    // presynaptic rows j (the neurons', then, at a sample's first sub-step, the last here, the inputs'): each owns
    // its parameter sums and its gradient column
    const i64 rows = q == 0 ? J : m;
#pragma omp parallel num_threads(threads) if (threads > 1 && B * rows * m >= PARALLEL_SYNAPSES)
    {
      std::vector<S> scratch(B * LANES);
#pragma omp for schedule(static)
      for (i64 j = 0; j < rows; ++j) {
        if (j < m)
          synapse_column_bwd(B, m, m, j, P.data(), D.data(), XT.data() + j * B, Gn.data(), m, acc, scratch.data());
        else
          synapse_column_bwd(B, n, m, j - m, Pin.data(), Din, XinT.data() + (j - m) * B, dX + ns * n, lx, acc_in,
                             scratch.data());
      }
    }
    if (L > 1 && q == 0) std::fill(Dsum.begin(), Dsum.end(), S(0));
    std::memcpy(gh, Gn.data(), B * m * sizeof(S));
    if (kind >= 2) {
      mm(B, m, m, Dw.data(), m, OhT, m, S(1), gh, m);                        // += dw O_h^T
      if (dOh) mm(m, m, B, XT.data(), B, Dw.data(), m, S(1), dOh, m);      // dO_h += h^T dw
    }
  }
  for (i64 i = 0; i < J * m; ++i) { dG[i] = S(aG[i]); dAa[i] = S(aA[i]); dBb[i] = S(aB[i]); dK[i] = S(aK[i]); }
  for (i64 i = 0; i < m; ++i) { dgl[i] = S(aL[i]); del[i] = S(aE[i]); dksh[i] = S(aS[i]); }
}

}  // namespace
