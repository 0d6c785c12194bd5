"""Multi-layer UnICORNN (thesis eq. 3.6) and its memory-saving reversible backward (eq. 3.7, 3.87–3.89).

:class:`UnICORNNStack` stacks ``Recurrent(UnICORNN(...), "symplectic-euler", dt_ℓ)`` layers; layer ℓ is
driven by layer ℓ−1's current y (y^0 = u). With ``reversible=True`` each layer runs through
:class:`ReversibleUnICORNN`, a custom autograd function whose forward keeps no per-step state: the backward
rebuilds (y_{n−1}, z_{n−1}) from (y_n, z_n) with the exact inverse of the symplectic Euler step (3.7) and
runs the adjoint recursion (3.87)–(3.89) alongside. What it saves for the backward is the layer input u, the
parameters and the final state -- O(B·T·m + B·d) instead of autograd's O(B·T·d) per-step activations.
The reconstruction is exact in exact arithmetic; in floating point it drifts by round-off, so the gradients
agree with autograd's to ~1e-5 in float32 and ~1e-12 in float64 over a few hundred steps.

The same reversible layer is fused (one forward and one backward kernel over the sequence: C++ on CPU, Triton on
CUDA, ``odelab.kernels`` with ``reversible=True``); the stack's ``engine`` picks it as ``Recurrent`` picks its
kernels, and ``engine="generic"`` runs :class:`ReversibleUnICORNN`.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .. import kernels
from ..kernels.autocast import outside_autocast
from ..solvers.derivatives import forward_mode_or_transform
from ..solvers.device import on_device_of
from ..systems.base import State
from ..systems.unicornn import UnICORNN
from .dropout import SequenceDropout
from .lengths import check_lengths, run_lengths
from .recurrent import Recurrent

STACK_ENGINES = ("auto", "generic", "fused")


class ReversibleUnICORNN(torch.autograd.Function):
    """One UnICORNN layer over a whole sequence, symplectic Euler with step Δt σ̂(c) (3.6), reversible backward.

    ``apply(u, V, b, w, c, z0, y0, dt, alpha, L) -> (ys, z_N, y_N)``: u ``(batch, time, input)``, ys
    ``(batch, time, hidden)`` = y after each sample's L sub-steps, each of them driven by the sample's x_n = V u_n + b.
    dt (the sub-step) and alpha are floats (no gradient, as in the official kernel).
    """

    @staticmethod
    def forward(ctx, u, V, b, w, c, z0, y0, dt, alpha, unfolds):
        h = dt * torch.sigmoid(c)  # per-neuron step Δt σ̂(c)
        z, y = z0, y0
        ys = []
        for x_n in F.linear(u, V, b).unbind(1):  # x_n = V u_n + b, one matmul for the sequence
            for _ in range(unfolds):
                z = z - h * (torch.tanh(w * y + x_n) + alpha * y)  # (3.6, z)
                y = y + h * z  # (3.6, y)
            ys.append(y)
        ctx.save_for_backward(u, V, b, w, c, z, y)
        ctx.dt, ctx.alpha, ctx.unfolds = dt, alpha, unfolds
        return torch.stack(ys, dim=1), z, y

    @staticmethod
    def backward(ctx, grad_ys, grad_z, grad_y):
        u, V, b, w, c, z, y = ctx.saved_tensors
        dt, alpha = ctx.dt, ctx.alpha
        sig = torch.sigmoid(c)
        h = dt * sig
        xs = F.linear(u, V, b).unbind(1)
        grad_outputs = grad_ys.unbind(1)  # autograd materialises unused output gradients as zeros
        adj_y = grad_outputs[-1] + grad_y  # dL/dy_N
        adj_z = grad_z  # dL/dz_N
        grad_w = torch.zeros_like(w)
        grad_h = torch.zeros_like(h)
        grad_xs = [None] * len(xs)
        for n in range(len(xs) - 1, -1, -1):
            grad_x = torch.zeros_like(xs[n])  # the sum over the sub-steps that x_n drives
            for _ in range(ctx.unfolds):
                # rebuild the previous state with the inverse step (3.7)
                y_prev = y - h * z
                drive = torch.tanh(w * y_prev + xs[n])
                force = drive + alpha * y_prev
                z_prev = z + h * force
                # adjoint of y_n = y_{n−1} + h z_n
                grad_h = grad_h + (adj_y * z).sum(0)
                adj_z = adj_z + h * adj_y
                # adjoint of z_n = z_{n−1} − h [tanh(w y_{n−1} + x_n) + α y_{n−1}]
                grad_h = grad_h - (adj_z * force).sum(0)
                grad_a = -h * adj_z * (1.0 - drive * drive)  # adjoint of the pre-activation a = w y_{n−1} + x_n
                grad_x = grad_x + grad_a
                grad_w = grad_w + (grad_a * y_prev).sum(0)
                adj_y = adj_y + grad_a * w - (h * alpha) * adj_z
                z, y = z_prev, y_prev
            grad_xs[n] = grad_x
            if n > 0:
                adj_y = adj_y + grad_outputs[n - 1]
        grad_x = torch.stack(grad_xs, dim=1)
        grad_u = grad_x @ V if ctx.needs_input_grad[0] else None
        grad_V = grad_x.flatten(0, 1).T @ u.flatten(0, 1) if ctx.needs_input_grad[1] else None
        grad_b = grad_x.sum((0, 1)) if ctx.needs_input_grad[2] else None
        grad_c = grad_h * dt * sig * (1.0 - sig)
        return grad_u, grad_V, grad_b, grad_w, grad_c, adj_z, adj_y, None, None, None


def run_reversible(system: UnICORNN, x: Tensor, state: State, dt: float, unfolds: int = 1,
                   lags=()) -> tuple[Tensor, State]:
    """One layer through :class:`ReversibleUnICORNN`, called as a kernel (``odelab.kernels``): the definition of
    the reversible layer, which the fused reversible kernels are tested against."""
    ys, z, y = ReversibleUnICORNN.apply(x, system.weight_input, system.bias, system.w, system.c, state[0], state[1],
                                        dt / unfolds, system.alpha, unfolds)
    return ys, (z, y)


def reversible_kernel(layer: Recurrent, x: Tensor) -> Callable | None:
    """The fused reversible kernel that a reversible stack runs for ``layer`` on ``x`` (its engine "auto" or
    "fused"), or None for :class:`ReversibleUnICORNN`; "fused" without one is an error."""
    if layer.engine not in ("auto", "fused"):
        return None
    impl = kernels.find(layer.system, layer.scheme.name, x, reversible=True)
    if impl is not None and impl.available():
        return impl.load()
    if layer.engine == "fused":
        raise ValueError(f"engine: no fused reversible kernel for UnICORNN on {x.device.type} with {x.dtype}; "
                         "use engine='auto' or 'generic'")
    return None


class UnICORNNStack(nn.Module):
    """Multi-layer UnICORNN (3.6): ``forward(x, state=None) -> (outputs, states)``.

    x ``(batch, time, input_size)``; outputs ``(batch, time, hidden_size)`` = the top layer's y at every
    step; states = one ``(z, y)`` tuple per layer. ``dt`` is the maximal step Δt, one float for every layer
    or one per layer (the paper's IMDB/EigenWorms runs use a different first-layer Δt); α is shared.
    ``reversible=True`` trains with the memory-saving inverse-step backward (3.7). ``engine`` ("auto",
    "fused", "generic") is set on every layer and chooses, per layer, as ``Recurrent`` does: the fused kernel
    where one exists for x's device and dtype (the reversible one with ``reversible=True``), else the Python
    definition (the generic loop, or :class:`ReversibleUnICORNN`). Under ``torch.func`` transforms and
    forward-mode AD every layer runs as ``Recurrent`` runs it there (the generic loop; ``engine="fused"`` refuses),
    reversible or not: the same values, without the memory saving. ``dropout`` (training only): after every layer,
    one mask per sequence and unit shared by every step (the official ``Dropout_overtime``; the top layer's too).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, dt: float | Sequence[float] = 0.1,
                 alpha: float = 0.0, reversible: bool = False, engine: str = "auto", dropout: float = 0.0):
        super().__init__()
        if not (isinstance(num_layers, int) and num_layers >= 1):
            raise ValueError(f"num_layers: expected an integer >= 1, got {num_layers!r}")
        try:
            dts = [dt] * num_layers if isinstance(dt, (int, float)) else list(dt)
        except TypeError:  # neither a number nor a sequence of them
            dts = None
        if dts is None or isinstance(dt, str):
            raise ValueError(f"dt: expected a positive step or one per layer, got {dt!r}")
        if len(dts) != num_layers:
            raise ValueError(f"dt: expected one step per layer ({num_layers}), got {len(dts)}")
        for step in dts:
            if not (isinstance(step, (int, float)) and math.isfinite(step) and step > 0):
                raise ValueError(f"dt: expected positive finite steps, got {dt!r}")
        self.layers = nn.ModuleList(
            Recurrent(UnICORNN(input_size if ell == 0 else hidden_size, hidden_size, alpha), "symplectic-euler", step)
            for ell, step in enumerate(dts)
        )
        self.hidden_size, self.reversible = hidden_size, reversible
        self.dropout = SequenceDropout(dropout)
        self.engine = engine

    @property
    def engine(self) -> str:
        return self._engine

    @engine.setter
    def engine(self, value: str) -> None:
        if value not in STACK_ENGINES:
            raise ValueError(f"engine: expected one of {list(STACK_ENGINES)}, got {value!r}")
        self._engine = value
        for layer in self.layers:
            layer.engine = value

    def extra_repr(self) -> str:
        return f"reversible={self.reversible}, engine={self.engine!r}"

    def forward(self, x: Tensor, state: Sequence[State] | None = None, lengths=None) -> tuple[Tensor, list[State]]:
        """``lengths``: as ``Recurrent.forward`` takes them (each sample's final states after its own length)."""
        if state is not None and len(state) != len(self.layers):
            raise ValueError(f"state: expected one (z, y) tuple per layer ({len(self.layers)}), got {len(state)}")
        masks = self._dropout_masks(x)
        if lengths is not None:
            self.layers[0]._check_input(x)
            lengths = check_lengths(lengths, x.shape[0], x.shape[1])
            if x.shape[0] and int(lengths.min()) < x.shape[1]:
                states = [layer.starting_state(x, None if state is None else state[ell])
                          for ell, layer in enumerate(self.layers)]
                # the masks travel with the states, so that every piece of a sample's time uses its own masks
                out, finals = run_lengths(self._pieces, x, states + [masks], lengths)
                return out, finals[:-1]
        return self._sequence(x, state, masks)

    def _dropout_masks(self, x: Tensor) -> tuple[Tensor, ...]:
        """One dropout factor (batch, 1, hidden) per layer, drawn once for the whole sequence; () when not dropping."""
        outputs = x.new_empty(x.shape[0], 1, self.hidden_size)  # the shape of a layer's outputs, one step
        masks = tuple(self.dropout.mask(outputs) for _ in self.layers)
        return () if masks[0] is None else masks

    def _pieces(self, x: Tensor, state: list) -> tuple[Tensor, list]:
        out, finals = self._sequence(x, state[:-1], state[-1])
        return out, finals + [state[-1]]

    def _sequence(self, x: Tensor, state: Sequence[State] | None, masks: tuple[Tensor, ...] = ()) \
            -> tuple[Tensor, list[State]]:
        finals = []
        for ell, layer in enumerate(self.layers):
            layer_state = None if state is None else state[ell]
            if self.reversible and not forward_mode_or_transform():  # there: the layer's loop, same values
                layer._check_input(x)
                layer_state = layer.starting_state(x, layer_state)
                kernel = reversible_kernel(layer, x) if x.shape[0] else None  # an empty batch: nothing to run
                if kernel is None:
                    x, final = run_reversible(layer.system, x, layer_state, layer.dt, layer.unfolds)
                else:
                    with on_device_of(x), outside_autocast(x):
                        x, final = kernel(layer.system, x, layer_state, layer.dt, layer.unfolds)
            else:
                x, final = layer(x, layer_state)
            if masks:
                x = x * masks[ell]
            finals.append(final)
        return x, finals
