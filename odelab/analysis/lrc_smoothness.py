"""LRC smoothness theory (Farsang, Neubauer & Grosu, "Liquid Resistance Liquid Capacitance Networks", App. A.1,
Theorem 1, eqs. 6–39) checked numerically on odelab's STC / LRC fields (``odelab.systems.liquid``).

One Euler output step o = Q h_t, h_t = h + Δt ḣ(h, x), y = [h, x] (neurons, then inputs):

* :func:`output_lipschitz` -- the empirical Lipschitz constant max_y ‖∂o/∂y‖₂ by autograd (eq. 6; "numerically
  checkable" item 1);
* :func:`stc_sensitivity` / :func:`lrc_sensitivity` -- the bounds on |∂ḣ_i/∂y_j| of eq. 23 (STC) and eq. 28 (LRC);
* :func:`bound_matrix` -- V of eq. 13 (K × (m + n); the paper prints K × m) and λ = ‖V‖₂ (eq. 14);
* :func:`construct_lrc` -- Theorem 1's LRC from an STC, |o_ji| < o*_ji (eq. 29), so ḣ^r = ε(w) ⊙ ḣ^s (eq. 24)
  (item 2);
* :func:`gate_inequalities` -- eqs. 15–17 on a grid (item 3);
* :func:`smoothness_study` -- all of it for a few random STCs (``odelab stability --study lrc-lipschitz``).

Reading of the paper (ours, where it is not explicit): the "+1" of eq. 23 bounds σ(f_i)|∂h_i/∂y_j| with the
paper's assumption |∂h/∂y_j| ≤ 1 and is added for every j, as printed; |h^s_i| of eq. 23 is replaced by a
bound ``h_bound`` on the states; and the maximum over y is taken over the box |h_j| ≤ h_bound, |x_j| ≤ x_bound.
On that compact box ε(w) stays below 1, which is what makes λ^r < λ^s strict: over all of ℝ^(m+n) the eq. 28
bound tends to the eq. 23 bound as ε → 1 (asymmetric elastance), and λ^r = λ^s.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from ..systems.liquid import LRC, STC, _ChemicalSynapses


def _system(model) -> _ChemicalSynapses:
    """The liquid System of ``model`` (an STC / LRC System, or a ``Recurrent`` wrapping one, e.g. ``cells.LRCU``)."""
    system = getattr(model, "system", model)
    if not isinstance(system, (STC, LRC)):
        raise TypeError(f"expected an STC or LRC system (or a Recurrent of one), got {type(system).__name__}")
    return system


def field(system, h: Tensor, x: Tensor) -> Tensor:
    """ḣ(h, x) of eq. 2 (STC) or eq. 3 (LRC) for states ``(batch, m)`` and inputs ``(batch, n)``."""
    system = _system(system)
    return system.block_derivative(0, 0.0, (h,), system.encode(x))


def euler_output(system, q: Tensor, dt: float, y: Tensor) -> Tensor:
    """o = Q (h + Δt ḣ(h, x)) for y = [h, x] ``(batch, m + n)`` (the output step of eqs. 7–12)."""
    m = _system(system).hidden_size
    h, x = y[..., :m], y[..., m:]
    return (h + dt * field(system, h, x)) @ q.T


def output_jacobians(system, q: Tensor, dt: float, y: Tensor) -> Tensor:
    """∂o/∂y per sample, ``(batch, K, m + n)`` by autograd (eq. 8); samples are independent, so row k is the
    gradient of Σ_b o_bk."""
    y = y.detach().clone().requires_grad_(True)
    out = euler_output(system, q, dt, y)
    rows = [torch.autograd.grad(out[:, k].sum(), y, retain_graph=k + 1 < out.shape[1])[0] for k in range(out.shape[1])]
    return torch.stack(rows, dim=1)


def output_lipschitz(system, q: Tensor, dt: float, y_samples: Tensor) -> float:
    """Empirical Lipschitz constant max over samples of ‖∂o/∂y‖₂ (eq. 6 by the mean value theorem; item 1)."""
    return torch.linalg.matrix_norm(output_jacobians(system, q, dt, y_samples), ord=2).max().item()


def o_star(stc) -> Tensor:
    """o*_ji = min{0.0625 |g_ji a_ji|, 0.25 |k_ji a_ji|} (eq. 29), ``(m + n, m)`` presynaptic index first."""
    s = _system(stc).symbols()
    return torch.minimum(0.0625 * (s["g"] * s["a"]).abs(), 0.25 * (s["k"] * s["a"]).abs())


def stc_sensitivity(system, h_bound: float) -> Tensor:
    """max_y |∂ḣ^s_i/∂y_j| ≤ 0.0625 |g_ji a_ji| |h_i| + 0.25 |k_ji a_ji e_li| + 1 (eq. 23) with |h_i| ≤ h_bound;
    ``(m + n, m)`` (j, i). Uses σ' ≤ 1/4 twice and tanh' ≤ 1 (eq. 15)."""
    s = _system(system).symbols()
    return 0.0625 * (s["g"] * s["a"]).abs() * h_bound + 0.25 * (s["k"] * s["a"] * s["e_l"]).abs() + 1.0


def elastance_range(lrc: LRC, h_bound: float, x_bound: float) -> tuple[Tensor, Tensor]:
    """(min, max) of ε(w_i) over the box |h| ≤ h_bound, |x| ≤ x_bound, w = O^T y + p (eqs. 3–5); ``(m,)`` each."""
    s = lrc.symbols()
    m = lrc.hidden_size
    radius = s["o"][:m].abs().sum(0) * h_bound + s["o"][m:].abs().sum(0) * x_bound
    lo, hi = s["p"] - radius, s["p"] + radius
    if lrc.elastance == "asymmetric":  # σ increasing
        return torch.sigmoid(lo), torch.sigmoid(hi)
    nearest = torch.where((lo <= 0) & (hi >= 0), torch.zeros_like(lo), torch.minimum(lo.abs(), hi.abs()))
    farthest = torch.maximum(lo.abs(), hi.abs())  # ε_S even and decreasing in |w|
    return lrc.elastance_of(farthest), lrc.elastance_of(nearest)


def lrc_sensitivity(lrc, h_bound: float, x_bound: float) -> Tensor:
    """max_y |∂ḣ^r_i/∂y_j| ≤ max_y [ε(w_i) S_ij + |ε'(w_i)| |o_ji| |ḣ^s_i|] (eq. 28), with S the eq. 23 bound,
    |ε'| ≤ ε(1 − ε) (eq. 17) and |ḣ^s_i| ≤ |h_i| + |e_li| (as eqs. 30–36); the concave quadratic in ε is maximised
    over ε's range on the box (:func:`elastance_range`). ``(m + n, m)``."""
    lrc = _system(lrc)
    s = lrc.symbols()
    sens = stc_sensitivity(lrc, h_bound)
    drift = s["o"].abs() * (h_bound + s["e_l"].abs())  # |o_ji| max|ḣ^s_i|
    lo, hi = elastance_range(lrc, h_bound, x_bound)
    vertex = (sens + drift) / (2 * drift).clamp_min(1e-300)  # argmax of ε(S + c) − ε² c
    eps = torch.minimum(torch.maximum(vertex, lo), hi)
    return eps * sens + eps * (1 - eps) * drift


def bound_matrix(system, q: Tensor, dt: float, h_bound: float, x_bound: float | None = None) -> tuple[Tensor, float]:
    """(V, λ): v_kj = Σ_i |q_ki| (1 + Δt max_y |∂ḣ_i/∂y_j|) (eq. 13), V of shape K × (m + n) (printed K × m: a
    typo), and λ = ‖V‖₂ (eq. 14), with the sensitivities of eq. 23 (STC) or eq. 28 (LRC) over the box
    |h| ≤ h_bound, |x| ≤ x_bound (default h_bound)."""
    system = _system(system)
    x_bound = h_bound if x_bound is None else x_bound
    sens = (lrc_sensitivity(system, h_bound, x_bound) if isinstance(system, LRC)
            else stc_sensitivity(system, h_bound))  # (j, i)
    v = q.abs() @ (1 + dt * sens).T  # (K, m) @ (m, m + n)
    return v, torch.linalg.matrix_norm(v, ord=2).item()


def construct_lrc(stc, shrink: float = 0.5, elastance: str = "asymmetric") -> LRC:
    """Theorem 1's LRC: every STC parameter copied, o_ji = shrink · o*_ji (eq. 29, strict for every pair when
    0 ≤ shrink < 1) and p = 0 (our choice: ε = 1/2 at y = 0 for eq. 4, the LRC's default initialisation), so that
    ḣ^r = ε(w) ⊙ ḣ^s (eq. 24). Symmetric elastance (eq. 5) keeps its default shift k = 1."""
    stc = _system(stc)
    if not 0.0 <= shrink < 1.0:
        raise ValueError(f"shrink: expected 0 <= shrink < 1 (eq. 29 strict for at least one pair), got {shrink}")
    lrc = LRC(stc.input_size, stc.hidden_size, elastance).to(dtype=stc.a.dtype, device=stc.a.device)
    m = stc.hidden_size
    o = shrink * o_star(stc).detach()
    with torch.no_grad():
        for name in ("raw_g", "a", "b", "k", "raw_g_leak", "e_leak"):
            getattr(lrc, name).copy_(getattr(stc, name))
        lrc.o_hidden.copy_(o[:m])
        lrc.o_input.copy_(o[m:])
        lrc.p.zero_()
    return lrc


def gate_inequalities(w_max: float = 20.0, k_max: float = 10.0, points: int = 2001) -> dict[str, float]:
    """Max violation of eqs. 15–17 on a float64 grid w ∈ [−w_max, w_max], k ∈ [0, k_max] (derivatives by
    autograd): σ' ≤ 1/4, tanh' ≤ 1 (15); |ε_S'| ≤ 1/4 (16); |ε'|/(1 − ε) ≤ ε for ε_A = σ and ε_S (17).
    A value ≤ 0 (up to rounding) means the inequality holds everywhere on the grid."""
    w = torch.linspace(-w_max, w_max, points, dtype=torch.float64).requires_grad_(True)
    k = torch.linspace(0.0, k_max, 101, dtype=torch.float64)[:, None]
    grid = w.detach()[None, :].repeat(k.shape[0], 1).requires_grad_(True)  # (k, w) for ε_S

    def derivative(values: Tensor, wrt: Tensor) -> Tensor:  # elementwise functions: the gradient of the sum
        return torch.autograd.grad(values.sum(), wrt)[0]

    sig, tanh = torch.sigmoid(w), torch.tanh(w)
    eps_s = torch.sigmoid(grid + k) - torch.sigmoid(grid - k)
    d_sig, d_tanh, d_eps_s = derivative(sig, w), derivative(tanh, w), derivative(eps_s, grid)
    sig, eps_s = sig.detach(), eps_s.detach()
    inside = eps_s < 1  # ε ∈ (0, 1) (eq. 17's hypothesis)
    return {"sigmoid_slope_15": (d_sig - 0.25).max().item(), "tanh_slope_15": (d_tanh - 1.0).max().item(),
            "symmetric_slope_16": (d_eps_s.abs() - 0.25).max().item(),
            "asymmetric_ratio_17": (d_sig.abs() / (1 - sig) - sig).max().item(),
            "symmetric_ratio_17": (d_eps_s.abs() / (1 - eps_s) - eps_s)[inside].max().item()}


def random_stc(input_size: int, hidden_size: int, seed: int) -> STC:
    """A float64 STC with odelab's initialisation (``systems.STC``) under ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return STC(input_size, hidden_size).double()


def smoothness_study(seeds: Sequence[int] = range(5), input_size: int = 2, hidden_size: int = 4, outputs: int = 2,
                     dt: float = 1.0, h_bound: float = 1.0, x_bound: float = 1.0, shrink: float = 0.5,
                     samples: int = 2000) -> dict:
    """Theorem 1 on random STCs: λ^s, λ^r (eqs. 13–14, 23, 28) of the STC and its constructed LRC (eq. 29), the
    empirical constants of both (eq. 6 by autograd, y uniform on the box), the field identity ḣ^r = ε ḣ^s (eq. 24)
    on the samples, and eqs. 15–17 on a grid; the symmetric-elastance LRC (eq. 5) as a second construction. The
    theorem orders the bounds only; the empirical constants need not follow (with Δt = 1 the Euler step
    I + Δt ε J^s can be larger than I + Δt J^s)."""
    rows = []
    for seed in seeds:
        stc = random_stc(input_size, hidden_size, seed)
        lrc = construct_lrc(stc, shrink)
        q = torch.randn(outputs, hidden_size, dtype=torch.float64) / math.sqrt(hidden_size)
        bound = torch.tensor([h_bound] * hidden_size + [x_bound] * input_size, dtype=torch.float64)
        y = (2 * torch.rand(samples, hidden_size + input_size, dtype=torch.float64) - 1) * bound
        _, lam_s = bound_matrix(stc, q, dt, h_bound, x_bound)
        _, lam_r = bound_matrix(lrc, q, dt, h_bound, x_bound)
        emp_s, emp_r = output_lipschitz(stc, q, dt, y), output_lipschitz(lrc, q, dt, y)
        symmetric = construct_lrc(stc, shrink, "symmetric")
        _, lam_sym = bound_matrix(symmetric, q, dt, h_bound, x_bound)
        emp_sym = output_lipschitz(symmetric, q, dt, y)
        with torch.no_grad():
            h, x = y[:, :hidden_size], y[:, hidden_size:]
            eps = lrc.elastance_of(y @ lrc.symbols()["o"] + lrc.p)
            identity = (field(lrc, h, x) - eps * field(stc, h, x)).abs().max().item()
        rows.append({"seed": seed, "lambda_stc": lam_s, "lambda_lrc": lam_r, "bound_ordered": lam_r < lam_s,
                     "empirical_stc": emp_s, "empirical_lrc": emp_r, "empirical_ordered": emp_r < emp_s,
                     "empirical_within_bound": emp_s <= lam_s and emp_r <= lam_r and emp_sym <= lam_sym,
                     "max_o_over_o_star": (lrc.symbols()["o"].abs() / o_star(stc)).max().item(),
                     "field_identity_error": identity, "lambda_lrc_symmetric": lam_sym,
                     "empirical_lrc_symmetric": emp_sym})
    return {"setup": {"input_size": input_size, "hidden_size": hidden_size, "outputs": outputs, "dt": dt,
                      "h_bound": h_bound, "x_bound": x_bound, "shrink": shrink, "samples": samples,
                      "elastance": "asymmetric (lambda_lrc) and symmetric, k = 1 (lambda_lrc_symmetric)",
                      "p": 0.0},
            "rows": rows, "all_bounds_ordered": all(r["bound_ordered"] for r in rows),
            "all_symmetric_bounds_ordered": all(r["lambda_lrc_symmetric"] < r["lambda_stc"] for r in rows),
            "empirical_ordered": sum(r["empirical_ordered"] for r in rows),
            "inequalities_15_17": gate_inequalities()}
