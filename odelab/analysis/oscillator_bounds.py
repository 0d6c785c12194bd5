"""Oscillator bounds of Rusch's thesis (2023, chs. 2–3) measured along trajectories of odelab's cells.

* :func:`cornn_energy_study` -- Props. 2.2.4 / 2.2.9: from y_0 = z_0 = 0 and for any input, the coRNN's hidden
  states satisfy y_nᵀy_n + (1/γ) z_nᵀz_n ≤ m t_n / γ (2.48), m the number of hidden units (y ∈ ℝ^m, σᵀσ ≤ m),
  t_n = nΔt; with γ = ε = 1 this is (2.10), y_nᵀy_n + z_nᵀz_n ≤ m t_n. Sufficient step conditions: (2.47)
  Δt < (2ε − 1)/(γ + ε²) for explicit damping (2.45), (2.50) Δt < (2ε − 1)/γ for implicit damping.
* :func:`perturbation_study` -- Prop. 2.2.5: two inputs give states whose difference satisfies
  ‖ΔX_n‖² = ‖Δy_n‖² + ‖Δz_n‖² ≤ 4 m t_n (2.12) (|σ(A) − σ(Ā)| ≤ 2): separation at most linear in time, "chaotic
  behavior … is ruled out"; against torch.nn.LSTM and the tanh torch.nn.RNN.
* :func:`symplectic_study` -- (3.25): UnICORNN's symplectic Euler step ∂X_n/∂X_{n−1} is block diagonal with one
  2×2 block per neuron, each of determinant 1; explicit Euler and rk4 of the same field are not volume preserving.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor, nn

from ..models import Recurrent, cells
from .stability import single_layer, stack_states, step_jacobians, trajectory

# (Δt, γ, ε): the official coRNN scripts' defaults (thesis_oscillators.md §2.4(g), tk-rusch/coRNN, probably the
# thesis's Table 2.8), the prototypical γ = ε = 1 case of Prop. 2.2.4, and the adding task's (γ, ε) at two steps
# above the (2.47) limit 0.0997: 0.105, where the explicit step is still linearly stable (4 − γΔt² − 2εΔt > 0),
# and 0.12, where it is not.
CORNN_SETTINGS = {
    "adding": (0.06, 66.0, 15.0),
    "sMNIST": (0.042, 2.7, 4.7),
    "psMNIST": (0.076, 0.4, 8.0),
    "noisy CIFAR-10": (0.034, 1.3, 12.7),
    "HAR-2": (0.1, 0.2, 6.4),
    "IMDB": (0.054, 4.9, 4.8),
    "γ = ε = 1": (0.4, 1.0, 1.0),
    "adding, Δt = 0.105": (0.105, 66.0, 15.0),
    "adding, Δt = 0.12": (0.12, 66.0, 15.0),
}


def step_limit(gamma: float, epsilon: float, damping: str) -> float:
    """The thesis's sufficient bound on Δt for (2.48): (2ε − 1)/(γ + ε²) with explicit damping (2.47),
    (2ε − 1)/γ with implicit damping (2.50). Not positive when ε ≤ ½ (no step qualifies)."""
    if damping == "explicit":
        return (2 * epsilon - 1) / (gamma + epsilon ** 2)
    if damping == "implicit":
        return (2 * epsilon - 1) / gamma
    raise ValueError(f"damping: expected 'explicit' or 'implicit', got {damping!r}")


def cornn_energy(z: Tensor, y: Tensor, gamma: float) -> Tensor:
    """y_nᵀy_n + (1/γ) z_nᵀz_n over the last axis, the left side of (2.48) ((2.10) at γ = 1)."""
    return y.square().sum(-1) + z.square().sum(-1) / gamma


def cornn_energy_bound(hidden_size: int, t: Tensor, gamma: float) -> Tensor:
    """m t_n / γ (2.48), m = ``hidden_size``; m t_n at γ = 1 (2.10)."""
    return hidden_size * t / gamma


def separation_bound(hidden_size: int, t: Tensor) -> Tensor:
    """4 m t_n (2.12), m = ``hidden_size``: the bound on ‖Δy_n‖² + ‖Δz_n‖² for two inputs (γ = ε = 1)."""
    return 4 * hidden_size * t


def _violations(values: Tensor, bound: Tensor) -> Tensor:
    """Where ``values`` exceed ``bound`` (NaN, from an overflowed state, counts as exceeding)."""
    return ~(values <= bound * (1 + 1e-12))


def cornn_energy_study(settings: dict[str, tuple[float, float, float]] = CORNN_SETTINGS,
                       dampings: Sequence[str] = ("explicit", "implicit"), steps: int = 1000, hidden_size: int = 16,
                       input_size: int = 2, batch: int = 8, input_scale: float = 10.0, seeds: Sequence[int] = (0, 1, 2),
                       dtype: torch.dtype = torch.float64) -> list[dict]:
    """Props. 2.2.4 / 2.2.9: random coRNN cells (``cells.CoRNN``, official init) with each (Δt, γ, ε) of
    ``settings`` and each damping, from zero, inputs N(0, input_scale²) (large: tanh saturates, σᵀσ → m). Per
    (setting, damping): the largest E_n = y_nᵀy_n + z_nᵀz_n/γ over batch and ``seeds``, its largest ratio to
    m t_n/γ (2.48), whether the bound held at every step, the first step n where it did not (None if it held),
    and whether the setting meets the damping's step condition ((2.47) or (2.50))."""
    rows = []
    t = torch.arange(1, steps + 1, dtype=dtype)
    for name, (dt, gamma, epsilon) in settings.items():
        for damping in dampings:
            curve = torch.zeros(steps, dtype=dtype)
            for seed in seeds:
                torch.manual_seed(seed)
                layer = single_layer(cells.CoRNN(input_size, hidden_size, dt, gamma, epsilon, damping)).to(dtype)
                x = input_scale * torch.randn(batch, steps, input_size, dtype=dtype)
                with torch.no_grad():
                    z, y = stack_states(trajectory(layer, x)[1])
                energy = cornn_energy(z, y, gamma).amax(0)
                curve = torch.where(energy.isnan() | (energy > curve), energy, curve)
            bound = cornn_energy_bound(hidden_size, dt * t, gamma)
            failed = _violations(curve, bound).nonzero()
            limit = step_limit(gamma, epsilon, damping)
            rows.append({"setting": name, "damping": damping, "dt": dt, "gamma": gamma, "epsilon": epsilon,
                         "step_limit": limit, "condition": "(2.47)" if damping == "explicit" else "(2.50)",
                         "condition_holds": dt < limit, "max_energy": float(curve.max()),
                         "max_ratio_to_bound": float((curve / bound).max()), "bound_holds": not len(failed),
                         "first_violation_step": int(failed[0]) + 1 if len(failed) else None,
                         "energy_curve": curve.tolist(), "bound_curve": bound.tolist()})
    return rows


def torch_rnn_states(rnn: nn.RNNBase, x: Tensor) -> Tensor:
    """``(batch, T, width)``: a one-layer batch-first torch RNN's state after every sample, from zero; (h, c)
    concatenated for an LSTM."""
    state, states = None, []
    for u in x.split(1, dim=1):
        _, state = rnn(u, state)
        states.append(torch.cat([s[0] for s in (state if isinstance(state, tuple) else (state,))], -1))
    return torch.stack(states, 1)


def cornn_states(layer: Recurrent, x: Tensor) -> Tensor:
    """``(batch, T, 2m)``: (z_n, y_n) of a coRNN layer after every sample, from zero."""
    return torch.cat(stack_states(trajectory(layer, x)[1]), -1)


def separation_curve(states, u: Tensor, u_bar: Tensor) -> Tensor:
    """``(T,)``: max over the batch of ‖X_n − X̄_n‖², the states (``states(x)`` ``(batch, T, width)``) under the inputs
    u and ū, run as one batch; for the coRNN the left side of (2.12), (y_n − ȳ_n)ᵀ(y_n − ȳ_n) + (z_n − z̄_n)ᵀ(z_n − z̄_n)."""
    with torch.no_grad():
        both = states(torch.cat([u, u_bar]))
    return (both[:len(u)] - both[len(u):]).square().sum(-1).amax(0)


def _separation_model(name: str, hidden_size: int, dt: float, gain: float, dtype: torch.dtype):
    """A model of :func:`perturbation_study` and its states function: the coRNN cell at γ = ε = 1 (damping
    explicit or implicit), torch.nn.LSTM, tanh torch.nn.RNN; the recurrent weights (W and 𝒲 for the coRNN,
    ``weight_hh`` for torch) scaled by ``gain``."""
    if name.startswith("cornn"):
        layer = single_layer(cells.CoRNN(1, hidden_size, dt, 1.0, 1.0, name.removeprefix("cornn-"))).to(dtype)
        with torch.no_grad():
            layer.system.weight[:, layer.system.input_size:].mul_(gain)
        return lambda x: cornn_states(layer, x)
    rnn = {"lstm": nn.LSTM, "rnn": nn.RNN}[name](1, hidden_size, batch_first=True).to(dtype)
    with torch.no_grad():
        rnn.weight_hh_l0.mul_(gain)
    return lambda x: torch_rnn_states(rnn, x)


SEPARATION_MODELS = ("cornn-explicit", "cornn-implicit", "lstm", "rnn")


def perturbation_study(models: Sequence[str] = SEPARATION_MODELS, gains: Sequence[float] = (1.0, 10.0),
                       steps: int = 1000, hidden_size: int = 16, batch: int = 8, delta: float = 1e-3,
                       dt: float = 0.4, seeds: Sequence[int] = (0, 1, 2), dtype: torch.dtype = torch.float64) -> dict:
    """Prop. 2.2.5: inputs u ~ N(0, 1) and ū = u + δ ξ, ξ ~ N(0, 1) at every step; ‖ΔX_n‖² between the two state
    sequences (coRNN: (z, y) at γ = ε = 1, Δt = ``dt`` < ½ meeting (2.47) and (2.50); LSTM: (h, c); RNN: h), max over
    batch and ``seeds``, with every model's recurrent weights at initialisation × each of ``gains``. Per model
    and gain: ‖ΔX_1‖², max_n and final ‖ΔX_n‖², log10 of max_n ‖ΔX_n‖² / ‖ΔX_1‖² (the amplification), and the
    largest ratio to 4 m t_n (2.12), which bounds the coRNN's only (t_n = n·dt for every model)."""
    t = dt * torch.arange(1, steps + 1, dtype=dtype)
    bound = separation_bound(hidden_size, t)
    rows = []
    for gain in gains:
        for name in models:
            curve = torch.zeros(steps, dtype=dtype)
            for seed in seeds:
                torch.manual_seed(seed)
                states = _separation_model(name, hidden_size, dt, gain, dtype)
                u = torch.randn(batch, steps, 1, dtype=dtype)
                curve = torch.maximum(curve, separation_curve(states, u, u + delta * torch.randn_like(u)))
            rows.append({"model": name, "gain": gain, "bound_applies": name.startswith("cornn"),
                         "first": float(curve[0]), "max": float(curve.max()), "final": float(curve[-1]),
                         "log10_amplification": math.log10(float(curve.max() / curve[0])),
                         "max_ratio_to_bound": float((curve / bound).max()),
                         "bound_holds": not bool(_violations(curve, bound).any()), "curve": curve.tolist()})
    return {"dt": dt, "delta": delta, "hidden_size": hidden_size, "t": t.tolist(), "bound": bound.tolist(),
            "rows": rows}


def neuron_blocks(jacobians: Tensor) -> Tensor:
    """``(..., m, 2, 2)``: the 2×2 block of every neuron i in ``(..., 2m, 2m)`` step Jacobians of a (z, y) state,
    rows and columns (z_i, y_i), the blocks B^i of (3.25) (there in (y, z) order; the determinant is the same)."""
    m = jacobians.shape[-1] // 2
    index = torch.arange(m)
    pairs = torch.stack([index, index + m], -1)  # (m, 2): z_i, y_i
    return jacobians[..., pairs[:, :, None], pairs[:, None, :]]


def off_block_size(jacobians: Tensor) -> Tensor:
    """max |entry| of the step Jacobians outside the per-neuron 2×2 blocks (0 for (3.25)'s block diagonal)."""
    m = jacobians.shape[-1] // 2
    neuron = torch.arange(2 * m) % m
    return jacobians.masked_fill(neuron[:, None] == neuron[None, :], 0.0).abs().amax()


def volume_change(layer: Recurrent, x: Tensor) -> dict[str, Tensor]:
    """det ∂X_n/∂X_{n−1} of every step of a (z, y) cell along x from zero (:func:`stability.step_jacobians`):
    ``block`` ``(batch, T, m)`` per neuron block, ``map`` ``(batch, T)`` of the whole step, and ``off_block``, the
    largest entry outside the blocks."""
    jacobians = step_jacobians(layer, x)
    return {"block": torch.linalg.det(neuron_blocks(jacobians)), "map": torch.linalg.det(jacobians),
            "off_block": off_block_size(jacobians)}


def symplectic_study(schemes: Sequence[str] = ("symplectic-euler", "euler", "rk4"), steps: int = 200,
                     hidden_size: int = 16, batch: int = 2, dt: float = 2.0, alpha: float = 0.5, seed: int = 0,
                     dtype: torch.dtype = torch.float64) -> dict:
    """(3.25): one random UnICORNN cell (``cells.UnICORNN``, official init, Δt = 2 and α = 0.5 its defaults)
    stepped by each scheme over N(0, 1) inputs from zero: max over steps and neurons of |det B^i − 1| and
    max |det ∂X_n/∂X_{n−1} − 1| of the whole step, per step (max over batch and neurons) for the figure, and the
    largest entry outside the 2×2 blocks. Symplectic Euler: 1 to round-off; euler, rk4: not."""
    torch.manual_seed(seed)
    system = single_layer(cells.UnICORNN(1, hidden_size, dt, alpha)).system.to(dtype)
    x = torch.randn(batch, steps, 1, dtype=dtype)
    result = {}
    for scheme in schemes:
        with torch.no_grad():
            det = volume_change(Recurrent(system, scheme, dt), x)
        block_error, map_error = (det["block"] - 1).abs(), (det["map"] - 1).abs()
        result[scheme] = {"max_block_error": float(block_error.max()), "max_map_error": float(map_error.max()),
                          "off_block": float(det["off_block"]),
                          "block_error_curve": block_error.amax((0, 2)).tolist(),
                          "map_error_curve": map_error.amax(0).tolist()}
    return {"dt": dt, "alpha": alpha, "hidden_size": hidden_size, "steps": steps, "schemes": result}


# ----------------------------------------------------------------------------------------------------------------
# Figures


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)


def plot_cornn_energy(rows: list[dict], path) -> None:
    """E_n / (m t_n/γ) along n per setting, one panel per damping (the bound (2.48) holds below 1); dashed:
    settings outside the damping's step condition."""
    plt = _plt()
    dampings = list(dict.fromkeys(row["damping"] for row in rows))
    fig, axes = plt.subplots(1, len(dampings), figsize=(6.5 * len(dampings), 4.5), squeeze=False)
    for ax, damping in zip(axes[0], dampings):
        for row in (r for r in rows if r["damping"] == damping):
            ratio = [e / b if e is not None and math.isfinite(e) else math.nan
                     for e, b in zip(row["energy_curve"], row["bound_curve"])]
            ax.plot(range(1, len(ratio) + 1), ratio, ls="-" if row["condition_holds"] else "--",
                    label=f"{row['setting']} (Δt {row['dt']:g}, γ {row['gamma']:g}, ε {row['epsilon']:g})")
        ax.axhline(1.0, color="black", lw=1)
        ax.set(xscale="log", yscale="log", xlabel="step n", ylabel="(yᵀy + zᵀz/γ) / (m t_n/γ)",
               title=f"coRNN, {damping} damping: (2.48), dashed outside {'(2.47)' if damping == 'explicit' else '(2.50)'}")
        ax.set_ylim(top=min(ax.get_ylim()[1], 1e3))  # a diverging setting leaves the axis, past its crossing of 1
        ax.legend(fontsize=7)
    _save(fig, path)


def plot_perturbation(result: dict, path) -> None:
    """‖ΔX_n‖² along n per model, one panel per gain, with 4 m t_n (2.12) in black."""
    plt = _plt()
    gains = list(dict.fromkeys(row["gain"] for row in result["rows"]))
    fig, axes = plt.subplots(1, len(gains), figsize=(6.5 * len(gains), 4.5), squeeze=False)
    for ax, gain in zip(axes[0], gains):
        for row in (r for r in result["rows"] if r["gain"] == gain):
            ax.plot(range(1, len(row["curve"]) + 1), row["curve"], label=row["model"])
        ax.plot(range(1, len(result["bound"]) + 1), result["bound"], color="black", lw=1, label="4 m t_n (2.12)")
        ax.set(xscale="log", yscale="log", xlabel="step n", ylabel="‖ΔX_n‖²",
               title=f"input perturbation δ = {result['delta']:g}, recurrent weights × {gain:g}")
        ax.legend(fontsize=7)
    _save(fig, path)


def plot_symplectic(result: dict, path) -> None:
    """|det − 1| of the step Jacobian per scheme along n: per-neuron blocks (solid) and whole map (dashed)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    floor = torch.finfo(torch.float64).eps / 4  # an exact 1 plotted at the bottom of the log axis
    for scheme, row in result["schemes"].items():
        n = range(1, len(row["block_error_curve"]) + 1)
        line, = ax.plot(n, [max(v, floor) for v in row["block_error_curve"]], label=f"{scheme}: 2×2 blocks")
        ax.plot(n, [max(v, floor) for v in row["map_error_curve"]], ls="--", color=line.get_color(),
                label=f"{scheme}: whole step")
    ax.set(yscale="log", xlabel="step n", ylabel="|det ∂X_n/∂X_(n−1) − 1|",
           title=f"UnICORNN step volume (3.25), Δt = {result['dt']:g}, α = {result['alpha']:g}")
    ax.legend(fontsize=7)
    _save(fig, path)
