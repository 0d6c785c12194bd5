"""References shared by the tests, each written from an equation or a textbook method, never from odelab."""
from __future__ import annotations

import numpy as np
import torch


def lem_eq3(x: torch.Tensor, symbols: dict, dt: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The LEM cell (Rusch et al. 2022, eq. 3) from zero: gates Δt_n = Δt σ̂(W1 y_{n−1} + V1 u_n + b1),
    Δt̄_n = Δt σ̂(W2 y_{n−1} + V2 u_n + b2); z_n = (1 − Δt_n) z_{n−1} + Δt_n tanh(Wz y_{n−1} + Vz u_n + bz), then
    y_n = (1 − Δt̄_n) y_{n−1} + Δt̄_n tanh(Wy z_n + Vy u_n + by). Returns (z, y), each (batch, T, d)."""
    s = symbols
    z = y = x.new_zeros(x.shape[0], s["W1"].shape[0])
    zs, ys = [], []
    for n in range(x.shape[1]):
        u = x[:, n]
        gate_z = dt * torch.sigmoid(y @ s["W1"].T + u @ s["V1"].T + s["b1"])
        gate_y = dt * torch.sigmoid(y @ s["W2"].T + u @ s["V2"].T + s["b2"])
        z = (1 - gate_z) * z + gate_z * torch.tanh(y @ s["Wz"].T + u @ s["Vz"].T + s["bz"])
        y = (1 - gate_y) * y + gate_y * torch.tanh(z @ s["Wy"].T + u @ s["Vy"].T + s["by"])
        zs.append(z)
        ys.append(y)
    return torch.stack(zs, 1), torch.stack(ys, 1)


def scipy_method_of_steps(rhs, delta: float, y0, times) -> np.ndarray:
    """y' = rhs(y, y(t − δ)), y = y0 on [−δ, 0]: scipy DOP853 (rtol 1e-12) interval by interval on
    [kδ, (k+1)δ], the delayed values from the previous interval's dense output. Returns (dim, len(times))."""
    from scipy.integrate import solve_ivp

    T, start, a = times[-1], np.asarray(y0, dtype=float), 0.0
    past, pieces = (lambda t: np.asarray(y0, dtype=float)), []
    while a < T - 1e-12:
        b = min(a + delta, T)
        sol = solve_ivp(lambda t, y, past=past: rhs(y, past(t - delta)), (a, b), start, method="DOP853",
                        rtol=1e-12, atol=1e-13, dense_output=True)
        pieces.append((a, b, sol.sol))
        past, start, a = sol.sol, sol.y[:, -1], b
    out = []
    for t in times:
        a, b, dense = next(p for p in pieces if p[0] <= t <= p[1] + 1e-12)
        out.append(dense(t) if t > 0 else np.asarray(y0, dtype=float))
    return np.stack(out, 1)


def assert_matches_finite_differences(loss, params, grads, eps: float, rtol: float) -> None:
    """Each entry of ``grads`` (autograd's, of ``loss()`` w.r.t. ``params``) against the central difference
    (loss(p + ε) − loss(p − ε)) / 2ε, within rtol · max(1, |fd|)."""
    with torch.no_grad():
        for k, (p, g) in enumerate(zip(params, grads)):
            flat, gflat = p.view(-1), g.reshape(-1)
            for i in range(flat.numel()):
                old = float(flat[i])
                flat[i] = old + eps
                up = float(loss())
                flat[i] = old - eps
                down = float(loss())
                flat[i] = old
                fd = (up - down) / (2 * eps)
                assert abs(float(gflat[i]) - fd) <= rtol * max(1.0, abs(fd)), (k, i, float(gflat[i]), fd)
