"""A sequence model = a system + a scheme + a step: ``Recurrent(system, scheme, dt)``.

Sample x_n of the input sequence drives the step(s) from t_{n−1} to t_n = n·dt (the hold convention); the
model emits the system's observable block after every sample, like ``torch.nn.RNN`` with
``batch_first=True``. ``unfolds`` = L runs L sub-steps of dt/L per sample (the LTC fused solver).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from .. import kernels
from ..kernels.autocast import outside_autocast
from ..solvers.derivatives import forward_mode_or_transform
from ..solvers.device import on_device_of
from ..solvers.recurrence import DelayedState, delay_lags, incoming_history, run_sequence
from ..solvers.schemes import Scheme, resolve_scheme
from ..systems.base import FunctionSystem, State, System, check_state
from .lengths import check_lengths, run_lengths

ENGINES = ("auto", "generic", "fused", "cuda-graph")


def first_order_only(engine: str) -> str:
    """The error of ``engine`` under a ``torch.func`` transform or forward-mode AD (``solvers.derivatives``)."""
    return (f"engine={engine!r} gives first-order reverse-mode gradients only, not a torch.func transform (vmap, "
            "grad, jacrev, jvp, ...) or forward-mode AD; engine='auto' or 'generic' runs the generic loop there")


class Recurrent(nn.Module):
    """``forward(x, state=None, lengths=None, dt=None) -> (outputs, final_state)``; x ``(batch, time, input)`` (batch first),
    ``system`` an odelab System or a callable ``f(t, y, u)`` (e.g. an nn.Module) with ``hidden_size`` given;
    outputs ``(batch, time, hidden)`` = the observable block at every step, final_state a tuple of blocks.
    Delay systems keep their delayed states in a ring buffer (``odelab.solvers.recurrence``).

    ``engine``: ``"generic"`` steps the scheme in Python (the definition); ``"fused"`` runs the registered
    kernel of this (system, scheme) pair on x's device (``odelab.kernels``; an error if there is none);
    ``"auto"`` (default) takes the kernel when one exists and the generic loop otherwise; ``"cuda-graph"``
    runs the generic loop captured in CUDA graphs, forward and backward, once per input shape
    (``odelab.kernels.cuda_graph``: for systems without a kernel, static shapes, CUDA only).

    ``state`` (None: zeros) is checked against x before anything runs (:meth:`starting_state`): one
    ``(batch, width)`` block per system block, in x's dtype and on its device. A delay system's final state is a
    ``DelayedState`` (``odelab.solvers.recurrence``): the blocks and the last states before them, so that a call
    continuing from it reads the delayed states one call over the whole sequence would (a plain tuple: zero
    history, the papers' start; ``engine="cuda-graph"`` always starts there). A kernel computes in the parameters'
    dtype also under ``torch.autocast`` (``odelab.kernels.autocast``), on x's CUDA device. Its gradients are
    first order: a backward through them after ``create_graph=True`` raises; ``torch.func`` transforms and
    forward-mode AD run the generic loop under "auto" (``odelab.solvers.derivatives``).

    ``learn_dt=True`` trains the step: Δt = dt_max · σ(θ), θ a parameter starting at Δt = ``dt`` (Rusch's thesis,
    coRNN's training details: "Δt constrained to [0, 1] by a sigmoid", dt_max = 1). Every sample then steps by the
    learned tensor, as per-sample steps requiring grad (``forward``'s ``dt``): on the kernels that give the step's
    gradient (``forward``), else on the generic loop; not for delay systems.
    ``dt`` reads its current value as a float.

    ``state_dropout`` = p (training only): every (sub-)step starts from its state, and reads its delayed states,
    through dropout with a fresh mask each time, as the τ-GRU code feeds its cell ``dropout(h)`` and
    ``dropout(h_delay)``; the states kept (outputs, history, final state) are the steps' own. A one-block cell with
    at most one delay draws the factors of the whole sequence at once, ``(batch, time · unfolds, 2, hidden)``, which
    the generic loop and τ-GRU's and Delay GRU's kernels (CPU and CUDA) read alike (the same seed, the same masks on
    either engine); the other cells draw at each step of the generic loop.
    """

    def __init__(self, system: System | Callable, scheme: str | Scheme = "imex", dt: float = 1.0, unfolds: int = 1,
                 hidden_size: int | None = None, engine: str = "auto", learn_dt: bool = False, dt_max: float = 1.0,
                 state_dropout: float = 0.0):
        super().__init__()
        if not isinstance(system, System):
            if not callable(system) or hidden_size is None:
                raise TypeError("system: expected an odelab System, or a callable f(t, y, u) together with hidden_size, "
                                f"got {type(system).__name__}")
            system = FunctionSystem(system, hidden_size, takes_input=True)  # a Module's parameters stay registered
        self.scheme = resolve_scheme(scheme)
        self.scheme.check(system)
        if isinstance(dt, bool) or not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt: expected a positive finite number, got {dt!r}")
        if isinstance(unfolds, bool) or not (isinstance(unfolds, int) and unfolds >= 1):
            raise ValueError(f"unfolds: expected a positive integer, got {unfolds!r}")
        if not (isinstance(state_dropout, (int, float)) and 0 <= state_dropout < 1):
            raise ValueError(f"state_dropout: expected a probability in [0, 1), got {state_dropout!r}")
        self.system, self.unfolds, self.state_dropout = system, unfolds, float(state_dropout)
        if learn_dt:
            if system.is_delay:
                raise ValueError(f"learn_dt: {type(system).__name__} is a delay system, whose ring buffer holds states "
                                 "⌊τ/Δt⌋ steps of one fixed length apart")
            if not (isinstance(dt_max, (int, float)) and dt < dt_max < float("inf")):
                raise ValueError(f"dt_max: expected a finite bound above dt = {dt} (the learned step is dt_max σ(θ)), "
                                 f"got {dt_max!r}")
            self.dt_max = float(dt_max)
            self.dt_logit = nn.Parameter(torch.tensor(math.log(dt / (dt_max - dt))))
        else:
            self._dt, self.dt_logit = float(dt), None
        self.output_index = system.block_index(system.observable)
        self.engine = engine
        self._graphs = None  # the captured loops of engine="cuda-graph", by input shape

    @property
    def engine(self) -> str:
        return self._engine

    @engine.setter
    def engine(self, value: str) -> None:
        if value not in ENGINES:
            raise ValueError(f"engine: expected one of {list(ENGINES)}, got {value!r}")
        self._engine = value

    @property
    def dt(self) -> float:
        """The step: the given one, or the learned one's current value."""
        return self._dt if self.dt_logit is None else float(self.learned_dt().detach())

    @dt.setter
    def dt(self, value: float) -> None:
        if not (isinstance(value, (int, float)) and 0 < value < (self.dt_max if self.dt_logit is not None else math.inf)):
            raise ValueError(f"dt: expected a positive number{' below dt_max' if self.dt_logit is not None else ''}, "
                             f"got {value!r}")
        if self.dt_logit is None:
            self._dt = float(value)
        else:
            with torch.no_grad():
                self.dt_logit.fill_(math.log(value / (self.dt_max - value)))

    def learned_dt(self) -> Tensor:
        """dt_max · σ(θ), with its gradient (``learn_dt=True``)."""
        return self.dt_max * torch.sigmoid(self.dt_logit)

    @property
    def hidden_size(self) -> int:
        return self.system.block_sizes()[self.output_index]

    def extra_repr(self) -> str:
        learned = f" (learned, at most {self.dt_max})" if self.dt_logit is not None else ""
        dropout = f", state_dropout={self.state_dropout}" if self.state_dropout else ""
        return (f"scheme={self.scheme.name!r}, dt={self.dt:g}{learned}, unfolds={self.unfolds}, engine={self.engine!r}"
                f"{dropout}")

    def _check_input(self, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"x: expected a tensor (batch, time, input), got {type(x).__name__}")
        if x.dim() != 3:
            raise ValueError(f"x: expected shape (batch, time, input), got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"x: expected a floating-point tensor, got {x.dtype}")
        if x.shape[1] == 0:
            raise ValueError(f"x: expected at least one step, got shape {tuple(x.shape)} (time = 0)")
        if self.system.input_size and x.shape[-1] != self.system.input_size:
            raise ValueError(f"x: expected {self.system.input_size} input features, got {x.shape[-1]}")
        weight = next(self.system.parameters(), None)
        if weight is not None and x.dtype != weight.dtype:
            raise TypeError(f"x: the model's parameters are {weight.dtype}, got input of dtype {x.dtype} "
                            f"(convert one: model.to({x.dtype}) or x.to({weight.dtype}))")
        if weight is not None and x.device != weight.device:
            raise ValueError(f"x: the model's parameters are on {weight.device}, got input on {x.device}")

    def starting_state(self, x: Tensor, state: State | None = None) -> State:
        """The state that ``forward(x, state)`` starts from: the zero state for None, else ``state`` checked
        against x (after ``_check_input``): one (batch, width) block per system block, with x's batch, dtype and
        device (a fused kernel reads the blocks as raw arrays of that layout)."""
        system = self.system
        if state is None:
            return system.initial_state(x.shape[0], dtype=x.dtype, device=x.device)
        history = getattr(state, "history", None) if system.is_delay else None
        state = check_state(system, state, "state")
        for block, width, s in zip(system.blocks, system.block_sizes(), state):
            if tuple(s.shape) != (x.shape[0], width):
                raise ValueError(f"state[{block!r}]: expected shape ({x.shape[0]}, {width}) (x's batch, the block's "
                                 f"width), got {tuple(s.shape)}")
            if s.dtype != x.dtype:
                raise TypeError(f"state[{block!r}]: expected dtype {x.dtype} (x's), got {s.dtype}")
            if s.device != x.device:
                raise ValueError(f"state[{block!r}]: expected a tensor on {x.device} (x's device), got {s.device}")
        if history is None:
            return state
        state = DelayedState(state, history)
        incoming_history(state, max(delay_lags(system, self.dt / self.unfolds), default=0))  # its shapes
        for block, h in zip(system.blocks, history):
            if h.dtype != x.dtype or h.device != x.device:
                raise TypeError(f"state.history[{block!r}]: expected {x.dtype} on {x.device} (x's), got {h.dtype} on "
                                f"{h.device}")
        return state

    def kernel(self, x: Tensor, gaps: bool = False, gap_grads: bool = False) -> Callable | None:
        """The fused implementation that ``forward(x)`` would run, or None for the generic loop (also under
        ``torch.func`` transforms and forward-mode AD, which the kernels do not support: ``solvers.derivatives``);
        ``gaps``: for per-sample steps (``forward(x, dt=gaps)``), which only some kernels take; ``gap_grads``: with
        their gradient (gaps requiring grad, a learned Δt), which fewer give."""
        if self.engine in ("generic", "cuda-graph"):
            return None
        if forward_mode_or_transform():
            if self.engine == "fused":
                raise ValueError(first_order_only("fused"))
            return None
        impl = kernels.find(self.system, self.scheme.name, x)
        blocker = self.system.kernel_blocker()
        if self._dropping() and impl is not None and not impl.dropout:
            blocker = "state dropout while training runs the generic loop"
        if gaps and impl is not None and not impl.gaps:
            blocker = "it steps every sample by the model's dt; per-sample steps run the generic loop"
        elif gap_grads and impl is not None and not impl.gap_grads:
            blocker = "its backward gives no gradient to the steps; steps that require one run the generic loop"
        if impl is not None and impl.available() and blocker is None:
            return impl.load()
        if self.engine == "fused":
            why = f" ({blocker})" if impl is not None and blocker is not None else ""
            raise ValueError(f"engine: no fused kernel for ({type(self.system).__name__}, {self.scheme.name!r}) on "
                             f"{x.device.type} with {x.dtype}{why}; use engine='auto' or 'generic'")
        return None

    def forward(self, x: Tensor, state: State | None = None, lengths=None, dt=None) -> tuple[Tensor, State]:
        """``lengths`` (one per sample, 1 … time; None: all of x): each sample's final state is its state after
        its own length, its outputs past it zeros (``odelab.models.lengths``: the samples still running continue
        from one distinct length to the next, each piece an ordinary call).

        ``dt`` (None: the model's step for every sample): the time each sample lasts, ``(batch, time)`` or
        ``(time,)``, ≥ 0 -- irregularly sampled sequences, where sample n of a sequence drives the step(s) over
        its own gap (Farsang et al. 2024, App. A.3.2: the elapsed time between inputs as the Euler step); split
        into ``unfolds`` equal sub-steps. The CPU and CUDA kernels of LEM, coRNN, the neural oscillator, GRU-ODE,
        LTC, STC and LRC take it (with ``lengths`` too); ``dt`` requiring grad (a learned Δt, say) runs the kernels
        whose backward gives its gradient (those cells, CPU and CUDA, every schedule) and the generic loop
        everything else; not for delay systems, whose ring buffer counts steps of one length."""
        self._check_input(x)
        state = self.starting_state(x, state)
        if dt is None and self.dt_logit is not None:
            dt = self.learned_dt().to(x.dtype).expand(x.shape[1])
        if dt is not None:
            gaps = self._check_gaps(dt, x)
            if lengths is not None:
                lengths = check_lengths(lengths, x.shape[0], x.shape[1])
            kernel = self.kernel(x, gaps=True, gap_grads=gaps.requires_grad) if x.shape[0] else None
            if kernel is not None:
                def run(x, state, gaps):
                    with on_device_of(x), outside_autocast(x):
                        return kernel(self.system, x, state, gaps, self.unfolds, ())

                if lengths is None or int(lengths.min()) == x.shape[1]:
                    return run(x, state, gaps)
                return run_lengths(run, x, state, lengths, gaps)  # each piece with its samples' gaps
            if self.engine == "fused":
                raise ValueError("dt: engine='fused' found no kernel for per-sample steps here; use engine='auto' or "
                                 "'generic'")
            active = None
            if lengths is not None:
                active = torch.arange(x.shape[1], device=x.device) < lengths.to(x.device)[:, None]
                x = x.masked_fill(~active.unsqueeze(-1), 0)  # what is padded (NaN, say) enters no step's gradient
            return run_sequence(self.system, self.scheme, x, state, gaps, self.unfolds, (), active,
                                self._drop(x, ()))
        if lengths is not None:
            lengths = check_lengths(lengths, x.shape[0], x.shape[1])
            if x.shape[0] and int(lengths.min()) < x.shape[1]:
                if self.engine == "cuda-graph":
                    raise ValueError("lengths: engine='cuda-graph' captures one graph per shape; run sequences of "
                                     "several lengths with engine='auto'")
                return run_lengths(self._sequence, x, state, lengths)
        return self._sequence(x, state)

    def _check_gaps(self, dt, x: Tensor) -> Tensor:
        """``dt`` as a ``(batch, time)`` tensor of x's dtype and device, after checking it (one host read)."""
        if self.system.is_delay:
            raise ValueError(f"dt: {type(self.system).__name__} is a delay system; its ring buffer holds states "
                             f"⌊τ/h⌋ steps of one length h apart, so every sample must last the model's dt")
        if self.engine == "cuda-graph":
            raise ValueError("dt: engine='cuda-graph' steps every sample by the model's dt; per-sample steps run "
                             "the generic loop or a kernel (engine='auto' or 'generic')")
        gaps = torch.as_tensor(dt, dtype=x.dtype, device=x.device)
        batch, steps = x.shape[:2]
        if gaps.shape not in ((batch, steps), (steps,)):
            raise ValueError(f"dt: expected shape ({batch}, {steps}) (batch, time) or ({steps},), got "
                             f"{tuple(gaps.shape)}")
        if gaps.numel() and not bool(((gaps >= 0) & gaps.isfinite()).all()):
            raise ValueError("dt: expected finite time gaps >= 0")
        return gaps.expand(batch, steps)

    def _sequence(self, x: Tensor, state: State) -> tuple[Tensor, State]:
        """The whole of x from a checked state, on the engine's path."""
        system = self.system
        lags = delay_lags(system, self.dt / self.unfolds) if system.is_delay else ()
        if self.engine == "cuda-graph":
            if forward_mode_or_transform():
                raise ValueError(first_order_only("cuda-graph"))
            if self._dropping():
                raise ValueError("engine='cuda-graph' captures a fixed computation; state dropout draws fresh masks "
                                 "at every step: use engine='auto' while training with it")
            if isinstance(state, DelayedState):
                raise ValueError("engine='cuda-graph' starts a delay system from zero history: give it the state's "
                                 "blocks as a plain tuple, or continue the sequence with engine='auto'")
            if self._graphs is None:
                from ..kernels.cuda_graph import GraphCache

                self._graphs = GraphCache()
            with on_device_of(x):  # graphs are captured on the current device
                return self._graphs.run(system, self.scheme, x, state, self.dt, self.unfolds, lags)
        kernel = self.kernel(x) if x.shape[0] else None  # an empty batch: nothing for a kernel to run
        drop = self._drop(x, lags)
        if kernel is not None:  # launched on x's device, computing in the parameters' dtype
            with on_device_of(x), outside_autocast(x):
                if drop is None:
                    return kernel(system, x, state, self.dt, self.unfolds, lags)
                return kernel(system, x, state, self.dt, self.unfolds, lags, drop=drop)
        return run_sequence(system, self.scheme, x, state, self.dt, self.unfolds, lags, drop=drop)

    def _dropping(self) -> bool:
        return self.training and self.state_dropout > 0

    def _drop(self, x: Tensor, lags: tuple[int, ...]) -> Callable[[Tensor], Tensor] | Tensor | None:
        """The state dropout of a training step (``run_sequence``'s ``drop``), or None: for a one-block cell with at
        most one delay, the factors of every sub-step, ``(batch, time · unfolds, 2, hidden)``, each 0 or 1/(1 − p);
        else a fresh draw at each step."""
        if not self._dropping():
            return None
        p = self.state_dropout
        if len(self.system.blocks) != 1 or len(lags) > 1:
            return lambda block: torch.nn.functional.dropout(block, p, training=True)
        shape = (x.shape[0], x.shape[1] * self.unfolds, 2, self.hidden_size)
        return torch.rand(shape, dtype=x.dtype, device=x.device).ge_(p).div_(1 - p)  # (cheaper than bernoulli_)
