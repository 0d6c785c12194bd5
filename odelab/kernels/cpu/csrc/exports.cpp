// ---- exports: NAME(f64, sizes, pointers, scalars); see odelab/kernels/cpu/extension.py ----------------
#define PTR(i) ((S*)p[i])
#define ODELAB_EXPORT(name, body)                                                                         \
  template <typename S> void name##_impl(const i64* n, void* const* p, const double* s) { body; }        \
  extern "C" void name(int f64, const i64* n, void* const* p, const double* s) {                         \
    if (f64) name##_impl<double>(n, p, s); else name##_impl<float>(n, p, s);                             \
  }

extern "C" {
void odelab_math_f32(i64 n, const float* x, float* sig, float* th) {  // for the tests of the fast math
  for (i64 i = 0; i < n; ++i) { sig[i] = sigmoid(x[i]); th[i] = tanh_(x[i]); }
}
void odelab_opening_f32(i64 n, const float* a, const float* y, const float* b, float* o) {  // the synapses' σ(a y + b)
#if defined(__AVX512F__)
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
    const __m512 scale = _mm512_set1_ps(OPENING_SCALE);
    _mm512_mask_storeu_ps(o + i, k, opening16(_mm512_mul_ps(scale, _mm512_maskz_loadu_ps(k, a + i)),
                                              _mm512_maskz_loadu_ps(k, y + i),
                                              _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(k, b + i))));
  }
#else
  for (i64 i = 0; i < n; ++i) o[i] = sigmoid(a[i] * y[i] + b[i]);
#endif
}
void odelab_product_f32(i64 M, i64 N, i64 K, const float* A, i64 lda, const float* B, i64 ldb, float beta, float* C,
                        i64 ldc, int transposed) {  // for the tests of the products: mm, or mm_tn (C += A^T B)
  if (transposed) mm_tn(M, N, K, A, lda, B, ldb, C, ldc);
  else mm(M, N, K, A, lda, B, ldb, beta, C, ldc);
}
void odelab_set_blas_threshold(i64 t) { blas_threshold = t; }
void odelab_set_threads(int t) { row_threads = t > 1 ? t : 1; }
int odelab_has_blas() { return (sgemm_ != nullptr && dgemm_ != nullptr) ? 1 : 0; }
#if defined(__AVX512F__)
int odelab_has_simd() { return 1; }
void odelab_set_simd(int on) { simd_products = on != 0; }
#else
int odelab_has_simd() { return 0; }
void odelab_set_simd(int) {}
#endif
}

// sizes (B, T, d); pointers A z0 y0 Wg^T Wy^T Z Y hs (hs may be null); scalars h
ODELAB_EXPORT(lem_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  lem_fwd<S>(rows, T, d, PTR(0) + b * T * 4 * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), PTR(4), s[0],
             PTR(5) + b * T * d, PTR(6) + b * T * d, at(PTR(7), b * T)); }))
// sizes (B, T, d); pointers A z0 y0 Wg Wy Z Y dY gz gy dA hs dhs dWg dWy (dY, hs, dhs may be null; dWg, dWy zeroed,
// or null: not wanted); scalars h
ODELAB_EXPORT(lem_backward, over_rows_in_step<S>(n[0], [&](i64 b, i64 rows, int part, int parts) {
  const i64 B = n[0], T = n[1], d = n[2];
  const WeightTerm<S> terms[] = {{PTR(10), 4 * d, 0, 3 * d, PTR(6), PTR(2), 0, PTR(13)},     // [ds1 dsz ds2]^T y
                                 {PTR(10), 4 * d, 3 * d, d, PTR(5), PTR(1), -1, PTR(14)}};  // dsy^T z'
  lem_bwd<S>(rows, T, d, PTR(0) + b * T * 4 * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), PTR(4), s[0],
             PTR(5) + b * T * d, PTR(6) + b * T * d, at(PTR(7), b * T * d), PTR(8) + b * d, PTR(9) + b * d,
             PTR(10) + b * T * 4 * d, at(PTR(11), b * T), at(PTR(12), b * T),
             weights_after_step(B, T, d, terms, part, parts)); }))
// sizes (B, T, d, implicit); pointers A z0 y0 𝒲^T W^T Z Y hs (hs may be null); scalars h γ ε
ODELAB_EXPORT(cornn_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  cornn_fwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), PTR(4), s[0], s[1], s[2],
               (int)n[3], PTR(5) + b * T * d, PTR(6) + b * T * d, at(PTR(7), b * T)); }))
// sizes (B, T, d, implicit); pointers A 𝒲 W dY gz gy dA hs z0 y0 Z Y dhs d𝒲 dW (dY, hs, dhs may be null; d𝒲, dW
// zeroed, or null: not wanted); scalars h γ ε
ODELAB_EXPORT(cornn_backward, over_rows_in_step<S>(n[0], [&](i64 b, i64 rows, int part, int parts) {
  const i64 B = n[0], T = n[1], d = n[2];
  const WeightTerm<S> terms[] = {{PTR(6), d, 0, d, PTR(10), PTR(8), 0, PTR(13)},    // ds^T z
                                 {PTR(6), d, 0, d, PTR(11), PTR(9), 0, PTR(14)}};  // ds^T y
  cornn_bwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1), PTR(2), s[0], s[1], s[2], (int)n[3], at(PTR(3), b * T * d),
               PTR(4) + b * d, PTR(5) + b * d, PTR(6) + b * T * d, at(PTR(7), b * T), at(PTR(8), b * d),
               at(PTR(9), b * d), at(PTR(10), b * T * d), at(PTR(11), b * T * d), at(PTR(12), b * T),
               weights_after_step(B, T, d, terms, part, parts)); }))
// sizes (B, T, d); pointers A z0 y0 w k Z Y; scalars h α
ODELAB_EXPORT(unicornn_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  unicornn_fwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), PTR(4), s[0], s[1],
                  PTR(5) + b * T * d, PTR(6) + b * T * d); }))
// sizes (B, T, d); pointers A y0 w k Z Y dY gz gy dA dw dk; scalars h α
ODELAB_EXPORT(unicornn_backward, unicornn_bwd<S>(n[0], n[1], n[2], PTR(0), PTR(1), PTR(2), PTR(3), s[0], s[1], PTR(4),
                                                 PTR(5), PTR(6), PTR(7), PTR(8), PTR(9), PTR(10), PTR(11)))
// sizes (B, T, d); pointers A w k z y Y; scalars h α
ODELAB_EXPORT(unicornn_reversible_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  unicornn_rev_fwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1), PTR(2), s[0], s[1], PTR(3) + b * d, PTR(4) + b * d,
                      PTR(5) + b * T * d); }))
// sizes (B, T, d); pointers A w k z y dY gz gy dw dk; scalars h α
ODELAB_EXPORT(unicornn_reversible_backward, unicornn_rev_bwd<S>(n[0], n[1], n[2], PTR(0), PTR(1), PTR(2), s[0], s[1],
                                                                PTR(3), PTR(4), PTR(5), PTR(6), PTR(7), PTR(8), PTR(9)))
// sizes (B, T, d); pointers A C h0 [W_r; W_f]^T W_u^T b_hu H hs (hs may be null); scalars Δ
ODELAB_EXPORT(gru_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  gru_fwd<S>(rows, T, d, PTR(0) + b * T * 3 * d, PTR(1) + b * T * d, PTR(2) + b * d, PTR(3), PTR(4), PTR(5), s[0],
             PTR(6) + b * T * d, at(PTR(7), b * T)); }))
// sizes (B, T, d); pointers A C h0 [W_r; W_f] W_u H dY gh dA dC hs dhs d[W_r; W_f] dW_u (dY, hs, dhs may be null;
// the weight gradients zeroed, or null: not wanted); scalars Δ
ODELAB_EXPORT(gru_backward, over_rows_in_step<S>(n[0], [&](i64 b, i64 rows, int part, int parts) {
  const i64 B = n[0], T = n[1], d = n[2];
  const WeightTerm<S> terms[] = {{PTR(8), 3 * d, 0, 2 * d, PTR(5), PTR(2), 0, PTR(12)},  // [ds_r ds_f]^T h
                                 {PTR(9), d, 0, d, PTR(5), PTR(2), 0, PTR(13)}};          // dc^T h
  gru_bwd<S>(rows, T, d, PTR(0) + b * T * 3 * d, PTR(1) + b * T * d, PTR(2) + b * d, PTR(3), PTR(4), s[0],
             PTR(5) + b * T * d, at(PTR(6), b * T * d), PTR(7) + b * d, PTR(8) + b * T * 3 * d, PTR(9) + b * T * d,
             at(PTR(10), b * T), at(PTR(11), b * T), weights_after_step(B, T, d, terms, part, parts)); }))
// sizes (B, T, d); pointers A z0 y0 W^T Z Y hs (hs may be null); scalars h
ODELAB_EXPORT(osc_forward, over_rows<S>(n[0], [&](i64 b, i64 rows) {
  const i64 T = n[1], d = n[2];
  osc_fwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1) + b * d, PTR(2) + b * d, PTR(3), s[0], PTR(4) + b * T * d,
             PTR(5) + b * T * d, at(PTR(6), b * T)); }))
// sizes (B, T, d); pointers A W dY gz gy dA hs Z dhs y0 Y dW (dY, hs, dhs may be null; Z read for dhs; dW zeroed, or
// null: not wanted); scalars h
ODELAB_EXPORT(osc_backward, over_rows_in_step<S>(n[0], [&](i64 b, i64 rows, int part, int parts) {
  const i64 B = n[0], T = n[1], d = n[2];
  const WeightTerm<S> terms[] = {{PTR(5), d, 0, d, PTR(10), PTR(9), 0, PTR(11)}};  // ds^T y
  osc_bwd<S>(rows, T, d, PTR(0) + b * T * d, PTR(1), s[0], at(PTR(2), b * T * d), PTR(3) + b * d, PTR(4) + b * d,
             PTR(5) + b * T * d, at(PTR(6), b * T), at(PTR(7), b * T * d), at(PTR(8), b * T),
             weights_after_step(B, T, d, terms, part, parts)); }))
// The ablated τ-GRU's layout (kind 2) from sizes n[k …]: ne nh e_u e_z e_g e_a w_u w_g w_a.
inline TauLayout tau_layout(const i64* n) { return {n[0], n[1], {n[2], n[3], n[4], n[5]}, {n[6], -1, n[7], n[8]}}; }
// sizes (kind, B, T, d, m, n0, TA, layout (9, tau_layout)); pointers A h0 weight_h^T W2^T H K (K: dropout factors,
// may be null); scalars Δ α β
ODELAB_EXPORT(gdelay_forward, over_rows<S>(n[1], [&](i64 b, i64 rows) {
  const int kind = (int)n[0]; const i64 T = n[2], d = n[3], TA = n[6]; const TauLayout L = tau_layout(n + 7);
  gdelay_fwd<S>(kind, rows, T, d, n[4], n[5], TA, PTR(0) + b * TA * gate_width(kind, d, L), PTR(1) + b * d, PTR(2),
                PTR(3), s[0], s[1], s[2], PTR(4) + b * T * d, at(PTR(5), b * T * 2 * d), L); }))
// sizes (kind, B, T, d, m, layout (9, tau_layout)); pointers A h0 weight_h W2 H dY gh dA Pend (a zero ring: see
// pending_slots) K dWh dW2 (K may be null; dWh, dW2 zeroed, or null: not wanted, and null with K, whose dropped
// states the products after the loop take); scalars Δ α β. A range of rows gets its own contiguous slots x rows x d
// of the ring.
ODELAB_EXPORT(gdelay_backward, over_rows_in_step<S>(n[1], [&](i64 b, i64 rows, int part, int parts) {
  const int kind = (int)n[0]; const i64 B = n[1], T = n[2], d = n[3], m = n[4]; const TauLayout L = tau_layout(n + 5);
  const i64 w = gate_width(kind, d, L);
  WeightTerm<S> terms[4];
  delay_weight_terms<S>(kind, d, m, L, PTR(7), PTR(4), PTR(1), PTR(10), PTR(11), terms);
  gdelay_bwd<S>(kind, rows, T, d, m, PTR(0) + b * T * w, PTR(1) + b * d, PTR(2), PTR(3), s[0], s[1], s[2],
                PTR(4) + b * T * d, at(PTR(5), b * T * d), PTR(6) + b * d, PTR(7) + b * T * w,
                PTR(8) + pending_slots(T, m) * b * d, at(PTR(9), b * T * 2 * d), L,
                weights_after_step(B, T, d, terms, part, parts)); }))
// sizes (R, n, w); pointers X V^T b A (b may be null)
ODELAB_EXPORT(affine_forward, over_rows<S>(n[0], [&](i64 r0, i64 rows) {
  affine_fwd<S>(rows, n[1], n[2], PTR(0) + r0 * n[1], PTR(1), PTR(2), PTR(3) + r0 * n[2]); }))
// sizes (R, n, w); pointers dA X dV^T db (db may be null)
ODELAB_EXPORT(affine_backward, affine_bwd<S>(n[0], n[1], n[2], PTR(0), PTR(1), PTR(2), PTR(3)))
// sizes (B, T, w, c0, nc, d, s, f); pointers dA H h0 O F (the dropout factors)
ODELAB_EXPORT(state_products, over_rows<S>(n[4], [&](i64 r0, i64 rows) {  // rows of O: columns of dA
  state_products<S>(n[0], n[1], n[2], n[3] + r0, rows, n[5], n[6], PTR(0), PTR(1), PTR(2), PTR(3) + r0 * n[5],
                    PTR(4), n[7]); }))
// sizes (kind, B, T, m, n, L, threads); pointers X h0 G Aa Bb K g_l e_l O_h k_shift W_in C H hs; scalars δ
ODELAB_EXPORT(liquid_forward, liquid_fwd<S>((int)n[0], n[1], n[2], n[3], n[4], n[5], usable_threads((int)n[6]), PTR(0), PTR(1), PTR(2),
                                            PTR(3), PTR(4), PTR(5), PTR(6), PTR(7), PTR(8), PTR(9), PTR(10), s[0],
                                            PTR(11), PTR(12), PTR(13)))
// sizes (kind, B, T, m, n, L, threads); pointers X C h0 G Aa Bb K e_l O_h^T k_shift H dY gh dX dG dAa dBb dK dg_l
// de_l dk_shift dO_h dW_in hs dhs (dhs: zeroed, or null); scalars δ
ODELAB_EXPORT(liquid_backward, liquid_bwd<S>((int)n[0], n[1], n[2], n[3], n[4], n[5], usable_threads((int)n[6]), PTR(0), PTR(1), PTR(2),
                                             PTR(3), PTR(4), PTR(5), PTR(6), PTR(7), PTR(8), PTR(9), s[0], PTR(10),
                                             PTR(11), PTR(12), PTR(13), PTR(14), PTR(15), PTR(16), PTR(17), PTR(18),
                                             PTR(19), PTR(20), PTR(21), PTR(22), PTR(23), PTR(24)))
