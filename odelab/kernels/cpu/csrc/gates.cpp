// ---- gate nonlinearities ------------------------------------------------------------------------------
// float: branch-free exp (Cephes expf: range reduction to |r| <= ln2/2, degree-7 polynomial, 2^k from the
// exponent bits) and tanh built on it, so that GCC vectorises the gate loops (std::exp/std::tanh are scalar
// libm calls and would dominate the step). About 1-2 ulp. double: std::exp / std::tanh.
// The argument is clamped to ±80, so a sigmoid never falls below e^{-80} = 1.8e-35 and neither it nor its products
// with a state are subnormal: GCC blends in the values at the clamps, precomputed and multiplied by each row's
// sub-step, and at the former −87 / 88 σ's was 6e-39, subnormal: STC's update took 85 ticks a row instead of 28
// (this CPU pays a microcode assist for subnormal operands).
namespace {

inline float exp_fast(float x) {
  x = x < -80.0f ? -80.0f : (x > 80.0f ? 80.0f : x);
  const float k = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - k * 0.693359375f) - k * (-2.12194440e-4f);
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const int32_t bits = ((int32_t)k + 127) << 23;
  float scale; std::memcpy(&scale, &bits, sizeof(float));
  return y * scale;
}
inline float tanh_fast(float x) {
  const float a = std::fabs(x);
  const float z = x * x;  // |x| < 0.625: odd polynomial (Cephes tanhf), else (1 − e^{−2|x|}) / (1 + e^{−2|x|})
  const float p = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                   + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
  const float t = exp_fast(-2.0f * a);
  const float q = std::copysign((1.0f - t) / (1.0f + t), x);
  return a < 0.625f ? p : q;
}
inline float sigmoid(float x) { return 1.0f / (1.0f + exp_fast(-x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline float tanh_(float x) { return tanh_fast(x); }
inline double tanh_(double x) { return std::tanh(x); }

// ---- the gated relaxation and a batch row's step (LEM, GRU-ODE, the delay cells) ------------------------
// The gated relaxation x' = x + h (σ(s) tanh(t) − σ(s) x) -- both LEM updates, the GRU-ODE Euler step and the
// delay cells'.
template <typename S>
inline __attribute__((always_inline))
void relax_fwd(i64 d, S h, const S* __restrict__ s1, const S* __restrict__ sz, const S* __restrict__ z,
               S* __restrict__ out) {
  for (i64 j = 0; j < d; ++j) {
    const S g = sigmoid(s1[j]), t = tanh_(sz[j]);
    out[j] = z[j] + h * (g * t - g * z[j]);
  }
}
// g: in = dL/dz', out = dL/dz (through the explicit term); d1, dt: dL/ds1, dL/dsz
template <typename S>
inline __attribute__((always_inline))  // (GCC left relax_bwd out of line: a call per batch row)
void relax_bwd(i64 d, S h, const S* __restrict__ s1, const S* __restrict__ sz, const S* __restrict__ z,
               const S* __restrict__ gin, S* __restrict__ gout, S* __restrict__ d1, S* __restrict__ dt) {
  for (i64 j = 0; j < d; ++j) {
    const S g = sigmoid(s1[j]), t = tanh_(sz[j]), gj = gin[j];
    d1[j] = gj * h * (t - z[j]) * g * (S(1) - g);
    dt[j] = gj * h * g * (S(1) - t * t);
    gout[j] = gj - h * g * gj;
  }
}
// Σ_j gin_j ∂x'_j/∂h = Σ_j gin_j σ(s_j) (tanh(t_j) − x_j): the step length's gradient (gin = dL/dx')
template <typename S>
S relax_dh(i64 d, const S* __restrict__ s1, const S* __restrict__ sz, const S* __restrict__ z,
           const S* __restrict__ gin) {
  S acc = S(0);
  for (i64 j = 0; j < d; ++j) acc += gin[j] * sigmoid(s1[j]) * (tanh_(sz[j]) - z[j]);
  return acc;
}

// the step of batch row b at step n: its own (hs (B, T), irregular sampling) or the shared h
template <typename S>
inline __attribute__((always_inline)) S step(const S* __restrict__ hs, S h, i64 b, i64 T, i64 n) {
  return __builtin_expect(hs != nullptr, 0) ? hs[b * T + n] : h;
}

}  // namespace
