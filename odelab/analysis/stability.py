"""Stability studies of the continuous-time cells.

* :func:`gradients_vs_lag` -- ‖∂L/∂h_k‖ against the lag T − k, L = r·o_T a fixed random projection of the last
  output: the exploding/vanishing-gradient picture (Rusch et al. 2022, §4, eqs. 5/25; Rusch 2023, Props. 3.2.2–3.2.4; Erichson et al. 2025, Prop. 3),
  odelab cells against torch.nn.LSTM and a tanh torch.nn.RNN.
* :func:`loss_gradient_terms` / :func:`contributions_to_loss` / :func:`contributions_of_step` /
  :func:`long_range_study` -- Rusch et al. 2022, eqs. 5/25 and Prop. 4.3 / E.2: the gradient of E_n split into
  the contributions ∂E_n^(k)/∂θ of the steps k ≤ n; for a fixed early k against n, LEM (Δt scaling) vs tanh RNN/LSTM.
* :func:`lem_state_bound` -- Rusch et al. 2022, Prop. 4.1: for Δt ≤ 1 and z_0 = y_0 = 0,
  max_i max(|z_n^i|, |y_n^i|) ≤ min(1, Δ̄ √t_n), Δ̄ = (1 + Δt)/√(2 − Δt), for any input.
* :func:`lem_gradient_vs_length` -- Prop. 4.2 / Remark E.1: the total gradient |∂E_N/∂θ| against N with
  Δt = N^−s, whose bound grows like N^(2(1 − s)), never exponentially.
* :func:`unicornn_energy` / :func:`energy_drift` -- the Hamiltonian (thesis eq. 3.4) along trajectories;
  :func:`invert_partitioned_euler` -- the exact inverse step (3.7).
* :func:`step_jacobians` -- ∂X_n/∂X_{n−1} of a cell's steps along a sequence (Rusch et al. 2022, App. E.2 eq. 27:
  I + Δt E + Δt² F for LEM; products give ∂X_n/∂X_k, eq. 26); for UnICORNN's symplectic step, det = 1.
* :func:`field_jacobian` / :func:`eigen_study` -- eigenvalues of h·∂f/∂state along a trajectory against the
  stability regions of explicit Euler, RK2, RK4 and implicit Euler.
* :func:`damping_study` -- LRC vs STC (and LTC) oscillation damping: zero crossings after a step input and
  of an oscillating pair .
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
import torch.autograd.forward_ad as forward_ad
from torch import Tensor, nn
from torch.nn import functional as F

from .. import systems
from ..models import Recurrent, cells
from ..solvers.field import Field
from ..solvers.schemes import Scheme
from ..systems.base import State, System
from .schemes import recurrent_layers

# ----------------------------------------------------------------------------------------------------------------
# Per-sample states of a Recurrent: a scheme wrapper that records (and optionally perturbs) the state after each
# sample, so the model's own forward (plain or delay ring buffer) runs unchanged.


class _SampleHook(Scheme):
    """Wraps a scheme; after every ``unfolds`` sub-steps (the end of a sample) adds ``probes[n]`` to the state
    (zero tensors whose gradient is ∂L/∂h_n) and records the state in ``states``."""

    def __init__(self, inner: Scheme, unfolds: int, probes: Sequence[State] | None = None):
        self.inner, self.unfolds, self.probes = inner, unfolds, probes
        self.name, self.order, self.stages = inner.name, inner.order, inner.stages
        self.substeps, self.states = 0, []

    def check(self, system: System) -> None:
        self.inner.check(system)

    def step(self, field: Field, t: float, state: State, dt: float) -> State:
        state = self.inner.step(field, t, state, dt)
        self.substeps += 1
        if self.substeps % self.unfolds == 0:
            if self.probes is not None:
                state = tuple(s + p for s, p in zip(state, self.probes[len(self.states)]))
            self.states.append(state)
        return state


def single_layer(model: nn.Module) -> Recurrent:
    """The one Recurrent of a cell or a one-layer UnICORNN stack (ValueError for deeper stacks)."""
    layers = recurrent_layers(model)
    if len(layers) != 1:
        raise ValueError(f"model: expected a single recurrent layer, got {len(layers)}")
    return layers[0]


def trajectory(layer: Recurrent, x: Tensor, state: State | None = None,
               probes: Sequence[State] | None = None) -> tuple[Tensor, list[State]]:
    """``(outputs, states)``: the layer's outputs on x and its full state after every sample (a list of T tuples)."""
    hook = _SampleHook(layer.scheme, layer.unfolds, probes)
    saved, layer.scheme = (layer.scheme, layer.engine), hook
    layer.engine = "generic"  # the hook is a scheme: only the generic loop steps through it
    try:
        outputs, _ = layer(x, state)
    finally:
        layer.scheme, layer.engine = saved
    return outputs, hook.states


def step_jacobians(layer: Recurrent, x: Tensor, state: State | None = None) -> Tensor:
    """``(batch, T, n, n)``: the Jacobian ∂X_n/∂X_{n−1} of every step of ``layer`` (one sample, its sub-steps
    included) along the sequence ``x`` from ``state`` (default: the layer's zero state), per sample, with the
    state's blocks flattened in ``layer.system.blocks`` order. Products of consecutive ones are ∂X_n/∂X_k (Rusch et
    al. 2022, eq. 26). The generic loop steps. Delay cells are refused (their step also reads the buffer)."""
    if layer.system.is_delay:
        raise ValueError(f"layer: {type(layer.system).__name__} is a delay system; its step reads states before "
                         f"X_(n−1), so ∂X_n/∂X_(n−1) alone is not its Jacobian")
    _, states = trajectory(layer, x, state)
    start = tuple(layer.starting_state(x, state))
    sizes = [s.shape[-1] for s in start]
    saved, layer.engine = layer.engine, "generic"
    try:
        out = []
        for b in range(x.shape[0]):
            rows = []
            for n in range(x.shape[1]):
                before = start if n == 0 else states[n - 1]
                u = x[b:b + 1, n:n + 1]

                def step(v: Tensor) -> Tensor:
                    blocks = tuple(part.unsqueeze(0) for part in v.split(sizes))
                    return torch.cat(layer(u, blocks)[1], -1)[0]

                v = torch.cat([s[b] for s in before]).detach()
                rows.append(torch.autograd.functional.jacobian(step, v))
            out.append(torch.stack(rows))
    finally:
        layer.engine = saved
    return torch.stack(out)


def stack_states(states: Sequence[State]) -> tuple[Tensor, ...]:
    """T state tuples -> one ``(batch, T, size)`` tensor per block."""
    return tuple(torch.stack(block, dim=1) for block in zip(*states))


# ----------------------------------------------------------------------------------------------------------------
# Gradients against lag


def _torch_rnn_gradients(rnn: nn.RNNBase, x: Tensor, direction: Tensor) -> Tensor:
    """‖∂L/∂(h_k[, c_k])‖ per sample and step for a torch.nn.RNN/LSTM/GRU stepped one sample at a time."""
    batch, hidden = x.shape[0], rnn.hidden_size
    parts = 2 if isinstance(rnn, nn.LSTM) else 1
    zeros = lambda: torch.zeros(1, batch, hidden, dtype=x.dtype, device=x.device)  # noqa: E731
    state = tuple(zeros() for _ in range(parts))
    probes = [tuple(zeros().requires_grad_() for _ in range(parts)) for _ in range(x.shape[1])]
    for x_n, probe in zip(x.unbind(1), probes):
        _, state = rnn(x_n.unsqueeze(1), state if parts == 2 else state[0])
        state = state if parts == 2 else (state,)
        state = tuple(s + p for s, p in zip(state, probe))
    loss = (state[0][0] @ direction).sum()  # o_T = h_T (with its probe)
    flat = [p for probe in probes for p in probe]
    grads = torch.autograd.grad(loss, flat, allow_unused=True)  # c_T does not reach o_T
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, flat)]
    per_step = torch.stack([torch.cat(grads[k * parts:(k + 1) * parts], -1)[0] for k in range(len(probes))], 1)
    return scaled_norm(per_step)  # (batch, T)


def state_gradients(model: nn.Module, x: Tensor, direction: Tensor) -> Tensor:
    """``(batch, T)``: ‖∂L/∂h_k‖ for every step k (all state blocks together), L = Σ_batch direction·o_T.

    ``model`` is an odelab cell (one Recurrent layer), a torch.nn RNN/LSTM/GRU, or the LSTM/GRU presets."""
    rnn = getattr(model, "rnn", model)
    if isinstance(rnn, nn.RNNBase):
        return _torch_rnn_gradients(rnn, x, direction)
    layer = single_layer(model)
    batch = x.shape[0]
    sizes = layer.system.block_sizes()
    probes = [tuple(torch.zeros(batch, n, dtype=x.dtype, device=x.device, requires_grad=True) for n in sizes)
              for _ in range(x.shape[1])]
    outputs, _ = trajectory(layer, x, probes=probes)
    loss = (outputs[:, -1] @ direction).sum()
    flat = [p for probe in probes for p in probe]
    grads = torch.autograd.grad(loss, flat, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, flat)]
    blocks = len(sizes)
    per_step = torch.stack([torch.cat(grads[k * blocks:(k + 1) * blocks], -1) for k in range(len(probes))], 1)
    return scaled_norm(per_step)


def scaled_norm(v: Tensor) -> Tensor:
    """‖v‖ over the last dimension, computed as m ‖v/m‖ with m = max |v| so that it does not underflow to 0
    while the entries are still representable (a plain norm squares them: 0 below ~1e-154 in float64)."""
    scale = v.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return (v / safe).norm(dim=-1) * scale.squeeze(-1)


def gradients_vs_lag(models: Sequence[str], steps: int, hidden_size: int = 16, batch: int = 4,
                     seeds: Sequence[int] = (0, 1, 2), dtype: torch.dtype = torch.float64) -> dict:
    """Median over random initialisations (``seeds``) of the batch-mean ‖∂L/∂h_k‖, as a function of the lag
    T − k (lag 0 = the last state), for every model; inputs N(0, 1), one feature."""
    result = {}
    for name in models:
        curves = []
        for seed in seeds:
            torch.manual_seed(seed)
            model = cells.build(name, 1, hidden_size).to(dtype)
            x = torch.randn(batch, steps, 1, dtype=dtype)
            direction = F.normalize(torch.randn(hidden_size, dtype=dtype), dim=0)
            curves.append(state_gradients(model, x, direction).mean(0).flip(0).detach())  # index = lag
        median = torch.stack(curves).median(0).values
        result[name] = {"lag": list(range(steps)), "median_norm": median.tolist(),
                        "norm_lag0": float(median[0]), "norm_last": float(median[-1]), **decay_summary(median)}
    return result


def decay_summary(norms: Tensor) -> dict:
    """log10 ‖∂L/∂h_1‖/‖∂L/∂h_T‖ (None once the gradient has underflowed), the first lag where it has (None if
    never), and the fitted rate, decades per 1000 steps (least-squares slope of log10 norm against lag before the
    underflow; < 0: vanishing, > 0: exploding). Underflowed = below the smallest normal number of the dtype:
    subnormal gradients lose precision and stall at the smallest subnormal instead of decaying."""
    positive = norms >= torch.finfo(norms.dtype).tiny
    lags = torch.arange(len(norms), dtype=torch.float64)[positive]
    logs = torch.log10(norms[positive].double())
    slope = least_squares_slope(lags, logs) * 1000 if len(lags) > 1 else None
    zero = (~positive).nonzero()
    return {"log10_ratio_last_to_lag0": float(torch.log10(norms[-1] / norms[0])) if positive[-1] else None,
            "underflow_lag": int(zero[0]) if len(zero) else None, "decades_per_1000_steps": slope}


def least_squares_slope(x: Tensor, y: Tensor) -> float:
    """The least-squares slope of y against x (1-D, at least two distinct x)."""
    centred = x - x.mean()
    return float((centred * (y - y.mean())).sum() / (centred ** 2).sum())


# ----------------------------------------------------------------------------------------------------------------
# Long-range gradient contributions (Rusch et al. 2022, Prop. 4.3 / E.2)


class _SampleRunner:
    """A model behind one interface for the gradient decompositions: ``run(x, state) -> (outputs, final state)``
    with the state a tuple of ``(batch, width)`` blocks, ``observe(state)`` = the output o_n, ``parameters`` by name.
    An odelab cell (its one non-delay Recurrent, stepped by the generic loop) or a one-layer batch-first
    torch.nn RNN/LSTM/GRU (the baselines), whose state is (h,) or (h, c). Every call starts at t = 0: the cells
    are autonomous (the input carries the time), as in :func:`step_jacobians`."""

    def __init__(self, model: nn.Module):
        rnn = getattr(model, "rnn", model)
        if isinstance(rnn, nn.RNNBase):
            if rnn.num_layers != 1 or rnn.bidirectional or not rnn.batch_first:
                raise ValueError("model: expected a one-layer, one-directional, batch-first torch RNN")
            self.module, self.blocks = rnn, 2 if isinstance(rnn, nn.LSTM) else 1
        else:
            layer = single_layer(model)
            if layer.system.is_delay:
                raise ValueError(f"model: {type(layer.system).__name__} is a delay system; its step reads states "
                                 "before X_(n−1), which a split into per-step terms from X_(n−1) misses")
            self.module, self.blocks = layer, None
        self.parameters = dict(self.module.named_parameters())

    def start(self, x: Tensor, state: State | None) -> State:
        if self.blocks is None:
            return tuple(self.module.starting_state(x, state))
        if state is not None:
            return tuple(state)
        return tuple(x.new_zeros(x.shape[0], self.module.hidden_size) for _ in range(self.blocks))

    def run(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        if self.blocks is None:
            saved, self.module.engine = self.module.engine, "generic"
            try:
                outputs, final = self.module(x, state)
            finally:
                self.module.engine = saved
            return outputs, tuple(final)
        packed = tuple(s.unsqueeze(0) for s in state)
        outputs, final = self.module(x, packed if self.blocks == 2 else packed[0])
        return outputs, tuple(s[0] for s in (final if self.blocks == 2 else (final,)))

    def observe(self, state: State) -> Tensor:
        return state[0] if self.blocks is not None else state[self.module.output_index]


def loss_gradient_terms(model: nn.Module, x: Tensor, target: Tensor, n: int = -1,
                        state: State | None = None) -> dict[str, Tensor]:
    """∂E_n^(k)/∂θ = (∂E_n/∂X_n)(∂X_n/∂X_k)(∂⁺X_k/∂θ) for every sample k = 0 … n (n < 0: from the end) and every
    parameter θ of ``model``'s recurrent layer (keys: that Recurrent's or torch RNN's ``named_parameters()``),
    stacked ``(n + 1, *θ.shape)`` (Rusch et al. 2022, eqs. 5/25); they sum to ∂E_n/∂θ. E_n = ½‖o_n − ȳ‖², averaged
    over the batch, ȳ = ``target`` ``(hidden,)`` or ``(batch, hidden)``, from ``state`` (None: zeros); ∂⁺X_k/∂θ is
    θ's use in sample k alone (its ``unfolds`` sub-steps together). Backpropagation through time one sample at a
    time: sample k runs from the detached X_(k−1), and its own backward, seeded with ∂E_n/∂X_k, gives the term of
    k and ∂E_n/∂X_(k−1). ``model``: as :class:`_SampleRunner` (no delay cells)."""
    runner = _SampleRunner(model)
    n = _sample_index(n, x.shape[1], "n")
    current = runner.start(x, state)
    samples = []
    with torch.enable_grad():
        for u in x[:, :n + 1].split(1, dim=1):
            before = tuple(s.detach().requires_grad_() for s in current)
            current = runner.run(u, before)[1]
            samples.append((before, current))
        final = tuple(s.detach().requires_grad_() for s in current)  # the blocks as independent coordinates of X_n
        loss = 0.5 * (runner.observe(final) - target).square().sum(-1).mean()
        seed = torch.autograd.grad(loss, final, allow_unused=True, materialize_grads=True)
        parameters, terms = tuple(runner.parameters.values()), []
        for before, after in reversed(samples):
            grads = torch.autograd.grad(after, before + parameters, seed, allow_unused=True, materialize_grads=True)
            seed = grads[:len(before)]
            terms.append(grads[len(before):])
    return {name: torch.stack(column[::-1]) for name, column in zip(runner.parameters, zip(*terms))}


def contributions_to_loss(model: nn.Module, x: Tensor, target: Tensor, n: int = -1,
                          state: State | None = None) -> dict[str, Tensor]:
    """``(n + 1,)`` per parameter: max over θ's entries of |∂E_n^(k)/∂θ| for k = 0 … n (the paper's |∂E_n^(k)/∂θ|
    for a scalar θ, at the worst entry), from :func:`loss_gradient_terms`."""
    terms = loss_gradient_terms(model, x, target, n, state)
    return {name: per_step.flatten(1).abs().amax(1) for name, per_step in terms.items()}


def contributions_of_step(model: nn.Module, x: Tensor, target: Tensor, k: int,
                          state: State | None = None) -> dict[str, Tensor]:
    """``(T − k,)`` per parameter: max over θ's entries of |∂E_n^(k)/∂θ| for n = k … T − 1: how much sample k
    contributes to the gradient of every later loss E_n (Rusch et al. 2022, Prop. 4.3; notation of
    :func:`loss_gradient_terms`). Forward mode from X_k, the batch copied once per state coordinate j with tangent
    e_j, gives ∂E_n/∂X_k = (o_n − ȳ)ᵀ ∂o_n/∂X_k / batch for all n in one pass; one backward of sample k alone
    (from the detached X_(k−1)) per n, seeded with it, gives ∂E_n^(k)/∂θ."""
    runner = _SampleRunner(model)
    batch, steps = x.shape[:2]
    k = _sample_index(k, steps, "k")
    with torch.no_grad():
        before = runner.start(x, state)
        if k:
            before = runner.run(x[:, :k], before)[1]
    with torch.enable_grad():
        after = runner.run(x[:, k:k + 1], tuple(s.detach() for s in before))[1]
    sizes = [s.shape[-1] for s in after]
    width = sum(sizes)
    tangents = torch.eye(width, dtype=x.dtype, device=x.device).repeat_interleave(batch, 0).split(sizes, -1)
    with torch.no_grad(), forward_ad.dual_level():  # copy j (rows j·batch … j·batch + batch − 1): tangent e_j
        start = tuple(forward_ad.make_dual(s.detach().repeat(width, 1), t.contiguous())
                      for s, t in zip(after, tangents))
        outputs = runner.observe(start).unsqueeze(1)
        if k + 1 < steps:
            outputs = torch.cat([outputs, runner.run(x[:, k + 1:].repeat(width, 1, 1), start)[0]], 1)
        o, do = forward_ad.unpack_dual(outputs)
    target = torch.as_tensor(target, dtype=x.dtype, device=x.device).expand(batch, o.shape[-1]).repeat(width, 1)
    seeds = (((o - target.unsqueeze(1)) * do).sum(-1) / batch).view(width, batch, -1).permute(2, 1, 0)
    parameters = tuple(runner.parameters.values())
    norms = []
    for seed in seeds:  # n = k … T − 1: seed (batch, width) = ∂E_n/∂X_k
        grads = torch.autograd.grad(after, parameters, seed.split(sizes, -1), retain_graph=True, allow_unused=True,
                                    materialize_grads=True)
        norms.append(torch.stack([g.abs().max() for g in grads]))
    return dict(zip(runner.parameters, torch.stack(norms, 1)))


def _sample_index(index: int, steps: int, name: str) -> int:
    """``index`` (negative: from the end) as 0 … steps − 1; ValueError outside."""
    if not -steps <= index < steps:
        raise ValueError(f"{name}: expected a sample index in [{-steps}, {steps}), got {index}")
    return index % steps


LONG_RANGE_MODELS = ("lem", "lem[dt=0.1]", "lem[dt=0.01]", "rnn", "lstm")


def long_range_study(models: Sequence[str] = LONG_RANGE_MODELS, steps: int = 1000, k: int = 10, lag: int = 10,
                     hidden_size: int = 16, batch: int = 4, seeds: Sequence[int] = (0, 1, 2),
                     dtype: torch.dtype = torch.float64) -> dict:
    """Rusch et al. 2022, Prop. 4.3 / E.2: the contribution max_θ |∂E_n^(k)/∂θ| (over every weight and bias) of the
    early sample k to the loss E_n = ½‖o_n − ȳ‖² for n = k … steps − 1, median over ``seeds`` of random models
    (``cells.build``, one input feature, inputs N(0, 1), ȳ ~ U[−1, 1]^hidden), with its decay in n − k
    (:func:`decay_summary`; per unit of time t_n − t_k too for the odelab cells): the paper expects no exponential
    decay for LEM, whose contribution is O(Δt^(3/2)) for θ = W_y; exponential decay for a tanh RNN / LSTM.
    ``at_lag``: every parameter's median contribution at n − k = ``lag``. Over the LEMs (specs ``lem[...]``), per
    parameter and for the max: the least-squares slope of log contribution against log Δt at that lag."""
    if not 0 <= k < steps or not 0 <= lag < steps - k:
        raise ValueError(f"k, lag: expected 0 <= k < steps and 0 <= lag < steps − k (steps = {steps}), got k = {k}, "
                         f"lag = {lag}")
    result = {}
    for name in models:
        curves = []
        for seed in seeds:
            torch.manual_seed(seed)
            model = cells.build(name, 1, hidden_size).to(dtype)
            x = torch.randn(batch, steps, 1, dtype=dtype)
            target = 2 * torch.rand(hidden_size, dtype=dtype) - 1
            per_parameter = contributions_of_step(model, x, target, k)
            curves.append({**per_parameter, "max": torch.stack(list(per_parameter.values())).amax(0)})
        medians = {key: torch.stack([c[key] for c in curves]).median(0).values for key in curves[0]}
        median = medians["max"]
        dt = None if isinstance(getattr(model, "rnn", model), nn.RNNBase) else single_layer(model).dt
        summary = decay_summary(median)
        rate = summary["decades_per_1000_steps"]
        result[name] = {"dt": dt, "lem": cells.parse_spec(name)[0] == "lem", "n_minus_k": list(range(steps - k)),
                        "median_contribution": median.tolist(), "contribution_first": float(median[0]),
                        "contribution_last": float(median[-1]), **summary,
                        "decades_per_unit_time": None if dt is None or rate is None else rate / (1000 * dt),
                        "at_lag": {key: float(values[lag]) for key, values in medians.items()}}
    lems = [row for row in result.values() if row["lem"]]
    dts = torch.tensor([row["dt"] for row in lems], dtype=torch.float64)
    slopes = {}
    for key in lems[0]["at_lag"] if lems else ():
        values = torch.tensor([row["at_lag"][key] for row in lems], dtype=torch.float64)
        fits = len(set(dts.tolist())) > 1 and bool((values > 0).all())
        slopes[key] = least_squares_slope(dts.log(), values.log()) if fits else None
    return {"k": k, "steps": steps, "lag": lag, "models": result,
            "dt_scaling": {"lag": lag, "dts": dts.tolist(), "slopes": slopes, "paper_slope": 1.5}}


# ----------------------------------------------------------------------------------------------------------------
# LEM state bound (Rusch et al. 2022, Prop. 4.1)


def lem_bound(dt: float, t: Tensor) -> Tensor:
    """min(1, Δ̄ √t_n), Δ̄ = (1 + Δt)/√(2 − Δt) (Rusch et al. 2022, Prop. 4.1, Δt ≤ 1)."""
    return torch.clamp((1 + dt) / math.sqrt(2 - dt) * t.sqrt(), max=1.0)


def lem_state_bound(dts: Sequence[float] = (0.1, 0.5, 1.0, 1.5, 1.9), steps: int = 1000, hidden_size: int = 16,
                    batch: int = 8, input_scale: float = 10.0, seeds: Sequence[int] = (0, 1, 2),
                    dtype: torch.dtype = torch.float64) -> list[dict]:
    """Random LEMs (official init, inputs N(0, input_scale²)) stepped by the published cell (imex, eq. 3) from
    zero; per Δt the largest max_i max(|z_n^i|, |y_n^i|), the largest ratio to the Prop. 4.1 bound, and whether
    the bound held at every step. For Δt > 1 (outside the hypothesis) the contraction bound
    max(1, Δt/(2 − Δt))  is reported instead."""
    rows = []
    for dt in dts:
        peak, ratio, holds, curve = 0.0, 0.0, True, None
        for seed in seeds:
            torch.manual_seed(seed)
            layer = Recurrent(systems.LEM(3, hidden_size), "imex", dt).to(dtype)
            x = input_scale * torch.randn(batch, steps, 3, dtype=dtype)
            with torch.no_grad():
                z, y = stack_states(trajectory(layer, x)[1])
            size = torch.maximum(z.abs(), y.abs()).amax(dim=(0, 2))  # (T,)
            t = dt * torch.arange(1, steps + 1, dtype=dtype)
            bound = lem_bound(dt, t) if dt <= 1 else torch.full_like(t, max(1.0, dt / (2 - dt)))
            curve = size if curve is None else torch.maximum(curve, size)
            peak = max(peak, float(size.max()))
            ratio = max(ratio, float((size / bound).max()))
            holds = holds and bool((size <= bound * (1 + 1e-12)).all())
        rows.append({"dt": dt, "hypothesis": dt <= 1, "max_state": peak, "max_ratio_to_bound": ratio,
                     "bound_holds": holds, "bound": "min(1, Δ̄√t_n)" if dt <= 1 else "max(1, Δt/(2−Δt))",
                     "t": t.tolist(), "max_state_curve": curve.tolist(), "bound_curve": bound.tolist()})
    return rows


# ----------------------------------------------------------------------------------------------------------------
# LEM: total gradient against sequence length with Δt = N^−s (Rusch et al. 2022, Prop. 4.2, Remark E.1)


def lem_gradient_bound(system: systems.LEM, dt: float, steps: int, target: Tensor) -> float:
    """Prop. 4.2's bound on every |∂E_N/∂θ|: (1 + Ŷ) t_N + (1 + Ŷ) Γ t_N², Ŷ = ‖ȳ‖_∞, Γ = 2(1 + η)(1 + 3η),
    η the largest ∞-norm (row sum) of W1, W2, Wz, Wy."""
    S = system.symbols()
    eta = max(float(S[name].detach().abs().sum(1).max()) for name in ("W1", "W2", "Wz", "Wy"))
    gamma, t_n, y_hat = 2 * (1 + eta) * (1 + 3 * eta), steps * dt, float(target.abs().max())
    return (1 + y_hat) * t_n + (1 + y_hat) * gamma * t_n ** 2


def lem_gradient_vs_length(lengths: Sequence[int] = (250, 500, 1000, 2000, 4000),
                           exponents: Sequence[float] = (0.0, 0.5, 4 / 7, 1.0), hidden_size: int = 16,
                           batch: int = 8, seeds: Sequence[int] = (0, 1, 2),
                           dtype: torch.dtype = torch.float64) -> dict:
    """Random LEMs (inputs N(0, 1), one feature; ȳ ~ U(−1, 1)^d) trained on E_N = ½ ‖y_N − ȳ‖² (batch mean):
    for each exponent s and length N, with Δt = N^−s, the median over ``seeds`` of max_θ |∂E_N/∂θ| over every
    weight and bias of the cell, and Prop. 4.2's bound. Per s, the least-squares slope of log gradient against
    log N (None for one length) beside Remark E.1's rate 2(1 − s) of the bound (s = 1: t_N = 1, bounded;
    s = 1/2: linear growth)."""
    rows, slopes = [], {}
    for s in exponents:
        medians = []
        for steps in lengths:
            dt = steps ** -s
            grads, bounds = [], []
            for seed in seeds:
                torch.manual_seed(seed)
                layer = Recurrent(systems.LEM(1, hidden_size), "imex", dt).to(dtype)
                x = torch.randn(batch, steps, 1, dtype=dtype)
                target = 2 * torch.rand(hidden_size, dtype=dtype) - 1
                _, (_, y) = layer(x)
                loss = 0.5 * ((y - target) ** 2).sum(-1).mean()
                params = [p for p in layer.parameters()]
                grads.append(max(float(g.abs().max()) for g in torch.autograd.grad(loss, params)))
                bounds.append(lem_gradient_bound(layer.system, dt, steps, target))
            median = float(torch.tensor(grads, dtype=torch.float64).median())
            medians.append(median)
            rows.append({"s": s, "steps": steps, "dt": dt, "t_N": steps * dt, "max_abs_gradient": median,
                         "bound": float(torch.tensor(bounds, dtype=torch.float64).median()),
                         "bound_holds": all(g <= b for g, b in zip(grads, bounds))})
        logs = torch.log(torch.tensor(medians, dtype=torch.float64))
        log_n = torch.log(torch.tensor(lengths, dtype=torch.float64))
        slope = least_squares_slope(log_n, logs) if len(lengths) > 1 else None
        slopes[f"{s:g}"] = {"slope": slope, "bound_rate": 2 * (1 - s)}
    return {"lengths": list(lengths), "exponents": list(exponents), "rows": rows, "slopes": slopes}


# ----------------------------------------------------------------------------------------------------------------
# UnICORNN: energy and exact invertibility


def _log_cosh(a: Tensor) -> Tensor:
    return a.abs() + torch.log1p(torch.exp(-2 * a.abs())) - math.log(2.0)


def unicornn_energy(system: systems.UnICORNN, z: Tensor, y: Tensor, encoded: Tensor) -> Tensor:
    """H = (α/2)‖y‖² + ½‖z‖² + Σ_i (1/w_i)[log cosh(w_i y_i + x_i) − log cosh(x_i)], x = V u + b (thesis eq. 3.4;
    the subtracted term is constant for a held input and keeps w_i → 0 finite, where the sum tends to
    y_i tanh(x_i)). Summed over the last axis; the per-neuron time scale σ̂(c) leaves H conserved."""
    w = system.w
    small = w.abs() < 1e-6
    safe_w = torch.where(small, torch.ones_like(w), w)
    potential = torch.where(small, y * torch.tanh(encoded), (_log_cosh(w * y + encoded) - _log_cosh(encoded)) / safe_w)
    return (0.5 * system.alpha * y.square() + 0.5 * z.square() + potential).sum(-1)


def energy_drift(system: systems.UnICORNN, schemes: Sequence[str] = ("symplectic-euler", "euler", "rk4"),
                 dt: float = 0.5, steps: int = 2000, batch: int = 8, seed: int = 0,
                 dtype: torch.dtype = torch.float64) -> dict:
    """H along trajectories from a random state N(0, 1) under a constant (held) random input, for each
    scheme at the same step: max_n |H_n − H_0| and |H_N − H_0| (batch means), and the H curves."""
    generator = torch.Generator().manual_seed(seed)
    m, d = system.input_size, system.hidden_size
    u = torch.randn(batch, 1, m, generator=generator, dtype=dtype).expand(batch, steps, m)
    state = tuple(torch.randn(batch, d, generator=generator, dtype=dtype) for _ in range(2))
    encoded = system.encode(u[:, 0])
    result = {}
    for name in schemes:
        layer = Recurrent(system, name, dt)
        with torch.no_grad():
            z, y = stack_states(trajectory(layer, u, state)[1])
            energy = torch.cat([unicornn_energy(system, *state, encoded).unsqueeze(1),
                                unicornn_energy(system, z, y, encoded.unsqueeze(1))], 1)  # (batch, T + 1)
        drift = (energy - energy[:, :1]).abs()
        result[name] = {"max_drift": float(drift.max(1).values.mean()), "final_drift": float(drift[:, -1].mean()),
                        "mean_energy": energy.mean(0).tolist()}
    return result


def invert_partitioned_euler(layer: Recurrent, final: State, x: Tensor) -> State:
    """Run the partitioned (symplectic) Euler step backwards over the input sequence x: blocks in reverse
    order, block_i ← block_i − h f_i(state). Exact when no block's derivative depends on that block itself
    (UnICORNN: y' = σ̂(c) z, z' = −σ̂(c)[tanh(w y + V u + b) + α y]; thesis eq. 3.7)."""
    system, h = layer.system, layer.dt / layer.unfolds
    state = list(final)
    inputs = system.encode(x).unbind(1)
    t = h * layer.unfolds * len(inputs)
    for u_n in reversed(inputs):
        for _ in range(layer.unfolds):
            t -= h
            for i in reversed(range(len(state))):
                state[i] = state[i] - h * system.block_derivative(i, t, tuple(state), u_n)
    return tuple(state)


def reconstruction_error(layer: Recurrent, x: Tensor, initial: State) -> float:
    """max |inverse(forward(initial)) − initial| over the sequence x (forward with the layer's own scheme)."""
    with torch.no_grad():
        _, final = layer(x, initial)
        rebuilt = invert_partitioned_euler(layer, final, x)
    return max(float((a - b).abs().max()) for a, b in zip(rebuilt, initial))


def inverse_study(lengths: Sequence[int] = (10, 100, 1000), dt: float = 2.0, hidden_size: int = 16,
                  batch: int = 4, alpha: float = 0.5, seed: int = 0) -> dict:
    """UnICORNN (symplectic Euler, eq. 3.6) forward over N(0, 1) inputs from a random state, then the exact
    inverse (3.7) back: the reconstruction error per sequence length in float32 and float64. Exact in exact
    arithmetic; in floating point the inverse amplifies the forward's round-off along the trajectory."""
    result = {"lengths": list(lengths), "dt": dt}
    for dtype in (torch.float32, torch.float64):
        errors = []
        for length in lengths:
            torch.manual_seed(seed)
            layer = Recurrent(systems.UnICORNN(1, hidden_size, alpha), "symplectic-euler", dt).to(dtype)
            x = torch.randn(batch, length, 1, dtype=dtype)
            initial = tuple(torch.randn(batch, hidden_size, dtype=dtype) for _ in range(2))
            errors.append(reconstruction_error(layer, x, initial))
        result[str(dtype).removeprefix("torch.")] = errors
    return result


# ----------------------------------------------------------------------------------------------------------------
# Eigenvalues of h·J against stability regions

STABILITY_FUNCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "euler": lambda z: 1 + z,  # |1 + z| ≤ 1
    "rk2 (midpoint, heun)": lambda z: 1 + z + z ** 2 / 2,
    "rk4": lambda z: 1 + z + z ** 2 / 2 + z ** 3 / 6 + z ** 4 / 24,
    "implicit euler": lambda z: 1 / (1 - z),  # |1/(1 − z)| ≤ 1
}


def field_jacobian(system: System, t: float, state: State, inp: Tensor | None) -> Tensor:
    """``(batch, n, n)``: ∂f/∂state of the vector field per sample, blocks flattened in ``system.blocks`` order."""
    sizes = list(system.block_sizes())
    jacobians = []
    for b in range(state[0].shape[0]):
        u_b = None if inp is None else inp[b:b + 1]

        def flat_field(v: Tensor) -> Tensor:
            blocks = tuple(part.unsqueeze(0) for part in v.split(sizes))
            return torch.cat(system.derivative(t, blocks, u_b), -1)[0]

        v = torch.cat([s[b] for s in state]).detach()
        jacobians.append(torch.autograd.functional.jacobian(flat_field, v))
    return torch.stack(jacobians)


def inside_fraction(z: Tensor, region: str, tol: float = 1e-9) -> float:
    """Fraction of the complex numbers z with |R(z)| ≤ 1 for the region's stability function R."""
    return float((STABILITY_FUNCTIONS[region](z).abs() <= 1 + tol).double().mean())


def eigen_study(models: Sequence[str], steps: int = 200, points: int = 10, hidden_size: int = 16, batch: int = 2,
                seed: int = 0) -> dict:
    """Eigenvalues of h·∂f/∂state (h = the cell's sub-step dt/unfolds) at ``points`` sample times along a
    trajectory on N(0, 1) inputs, for each model at its published (system, scheme, dt); the fraction inside
    each stability region."""
    result = {}
    for name in models:
        torch.manual_seed(seed)
        layer = single_layer(cells.build(name, 1, hidden_size)).double()
        x = torch.randn(batch, steps, 1, dtype=torch.float64)
        with torch.no_grad():
            states = trajectory(layer, x)[1]
        encoded = layer.system.encode(x)
        h = layer.dt / layer.unfolds
        eigs = []
        for n in torch.linspace(0, steps - 2, points).round().long().tolist():
            jac = field_jacobian(layer.system, (n + 1) * layer.dt, states[n], encoded[:, n + 1].detach())
            eigs.append(torch.linalg.eigvals(h * jac).flatten())
        z = torch.cat(eigs)
        result[name] = {"scheme": layer.scheme.name, "h": h, "eigenvalues_real": z.real.tolist(),
                        "eigenvalues_imag": z.imag.tolist(), "max_abs": float(z.abs().max()),
                        "inside": {region: inside_fraction(z, region) for region in STABILITY_FUNCTIONS}}
    return result


# ----------------------------------------------------------------------------------------------------------------
# LRC vs STC oscillation damping 


def sign_changes(values: Tensor, tol: float) -> int:
    """Sign changes of a 1-D sequence, ignoring entries with |value| ≤ tol."""
    kept = values[values.abs() > tol]
    return int((torch.sign(kept[1:]) != torch.sign(kept[:-1])).sum()) if kept.numel() > 1 else 0


def _set_synapses(system, g, a, k, g_leak, e_leak) -> None:
    """Set eq. 1's g, a, k (presynaptic-first (m + n, m) nested lists; b = 0), g_l, e_l; g = 0 means no synapse."""
    def raw(value: Tensor) -> Tensor:  # softplus⁻¹, with −∞ → softplus = 0 for absent synapses
        return torch.where(value > 0, value + torch.log(-torch.expm1(-value.clamp_min(1e-300))),
                           torch.full_like(value, -800.0))

    dtype = torch.float64
    with torch.no_grad():
        system.raw_g.copy_(raw(torch.tensor(g, dtype=dtype)))
        system.a.copy_(torch.tensor(a, dtype=dtype))
        system.b.zero_()
        system.k.copy_(torch.tensor(k, dtype=dtype))
        system.raw_g_leak.copy_(raw(torch.tensor(g_leak, dtype=dtype)))
        system.e_leak.copy_(torch.tensor(e_leak, dtype=dtype))


def _set_elastance(system: systems.LRC, o_hidden, o_input, p, shift=None) -> None:
    dtype = torch.float64
    with torch.no_grad():
        system.o_hidden.copy_(torch.tensor(o_hidden, dtype=dtype))
        system.o_input.copy_(torch.tensor(o_input, dtype=dtype))
        system.p.copy_(torch.tensor(p, dtype=dtype))
        if shift is not None:
            system.raw_k_shift.copy_(torch.log(torch.expm1(torch.tensor(shift, dtype=dtype))))


def surrogate_s1() -> dict[str, System]:
    """S1: one neuron, self synapse (g, a, k) = (1, 4, −3), input synapse (0.5, 1, 2), g_l = 0.1, e_l = 1;
    LRC-A w = 0.5 h − x − 1, LRC-S w = 0.5 h with k = 0.2."""
    models = {"LTC": systems.LTC(1, 1), "STC": systems.STC(1, 1), "LRC-A": systems.LRC(1, 1, "asymmetric"),
              "LRC-S": systems.LRC(1, 1, "symmetric")}
    for system in models.values():
        system.double()
        _set_synapses(system, [[1.0], [0.5]], [[4.0], [1.0]], [[-3.0], [2.0]], [0.1], [1.0])
    _set_elastance(models["LRC-A"], [[0.5]], [[-1.0]], [-1.0])
    _set_elastance(models["LRC-S"], [[0.5]], [[0.0]], [0.0], shift=[0.2])
    return models


def surrogate_s2() -> dict[str, System]:
    """S2: two neurons, h2 → h1 (g, a, k) = (1, 2, −4), h1 → h2 (1, 2, 4), x → h1 (0.5, 1, 4), x → h2 (0.5, 1, −4),
    no self synapses, g_l = 0.1, e_l = 1; four elastances (uniform, non-uniform A and S, state-dependent)."""
    g = [[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]
    a = [[0.0, 2.0], [2.0, 0.0], [1.0, 1.0]]
    k = [[0.0, 4.0], [-4.0, 0.0], [4.0, -4.0]]
    models = {"STC": systems.STC(1, 2), "LRC-A uniform": systems.LRC(1, 2, "asymmetric"),
              "LRC-A non-uniform": systems.LRC(1, 2, "asymmetric"), "LRC-S non-uniform": systems.LRC(1, 2, "symmetric"),
              "LRC-A state-dependent": systems.LRC(1, 2, "asymmetric")}
    for system in models.values():
        system.double()
        _set_synapses(system, g, a, k, [0.1, 0.1], [1.0, 1.0])
    zero_h, zero_x = [[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0]]
    _set_elastance(models["LRC-A uniform"], zero_h, zero_x, [-1.0, -1.0])
    _set_elastance(models["LRC-A non-uniform"], zero_h, zero_x, [-4.0, 2.0])
    _set_elastance(models["LRC-S non-uniform"], zero_h, zero_x, [0.0, 0.0], shift=[0.05, 3.0])
    _set_elastance(models["LRC-A state-dependent"], [[3.0, 0.0], [3.0, 0.0]], zero_x, [-4.0, 2.0])
    return models


def equilibrium(system: System, inp: Tensor, guess: Tensor, iterations: int = 50) -> Tensor:
    """Newton's method on f(h) = 0 for a one-block system with a held encoded input; returns h* ``(1, m)``."""
    h = guess.clone()
    for _ in range(iterations):
        jac = field_jacobian(system, 0.0, (h,), inp)[0]
        h = h - torch.linalg.solve(jac, system.derivative(0.0, (h,), inp)[0][0]).unsqueeze(0)
    return h


def damping_study(horizon: float = 40.0, fine_dt: float = 0.05, coarse_steps: int = 40,
                  surrogates: Sequence[str] = ("S1", "S2")) -> dict:
    """For S1 (step input x ≡ 1 from h = 0) and S2 (x ≡ 0 from h = (1, 0)): equilibrium h*, eig(J), |eig(I + J)|
    (the E1 amplification at Δ = 1), zero crossings of h_1 − h_1* of the fine solution (rk4, ``fine_dt``) on
    [0, horizon], and sign changes of the E1 trajectory h_0, ..., h_N (Δ = 1, N = ``coarse_steps``). Tolerances
    as the LRC paper's surrogates: 1e-9 (S1), 1e-6 (S2)."""
    setups = {"S1": (surrogate_s1, 1.0, [0.0], 1e-9), "S2": (surrogate_s2, 0.0, [1.0, 0.0], 1e-6)}
    result = {}
    for label in surrogates:
        build, value, h0, tol = setups[label]
        models = build()
        rows = {}
        for name, system in models.items():
            state = (torch.tensor([h0], dtype=torch.float64),)
            fine = Recurrent(system, "rk4", fine_dt)
            coarse = Recurrent(system, "euler", 1.0)
            with torch.no_grad():
                x_fine = torch.full((1, round(horizon / fine_dt), 1), value, dtype=torch.float64)
                h_fine = torch.cat([state[0], fine(x_fine, state)[0][0]])
                x_coarse = torch.full((1, coarse_steps, 1), value, dtype=torch.float64)
                h_coarse = torch.cat([state[0], coarse(x_coarse, state)[0][0]])  # h_0, h_1, ..., h_N
            inp = system.encode(x_fine[:, 0])
            star = equilibrium(system, inp, h_fine[-1:].detach())
            jac = field_jacobian(system, 0.0, (star,), inp)[0]
            eig = torch.linalg.eigvals(jac)
            rows[name] = {
                "equilibrium": star[0].tolist(),
                "eig_real": eig.real.tolist(), "eig_imag": eig.imag.tolist(),
                "e1_amplification": torch.linalg.eigvals(torch.eye(len(eig), dtype=jac.dtype) + jac).abs().tolist(),
                "zero_crossings_fine": sign_changes(h_fine[:, 0] - star[0, 0], tol),
                "sign_changes_e1": sign_changes(h_coarse[:, 0] - star[0, 0], tol),
                "fine_h1": h_fine[:, 0].tolist(), "e1_h1": h_coarse[:, 0].tolist(),
            }
        result[label] = {"input": value, "h0": h0, "fine_dt": fine_dt, "horizon": horizon, "models": rows}
    return result
