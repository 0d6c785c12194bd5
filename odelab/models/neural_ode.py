"""The MLP neural ODE (Chen et al. 2018) as a sequence body: the baseline of the LRC paper's Neural-ODE
benchmarks (Farsang et al. 2024, §4.3: "a 3-layer MLP Neural ODE (32, 32, 2 units)" solved with dopri5).

The state is the observation itself, y ∈ R^d (d = ``input_size``), and evolves autonomously:

    dy/dt = f_θ(y),   f_θ = Linear(d, w) → tanh → Linear(w, w) → tanh → Linear(w, d)

with y(0) = x_0, the first input sample (the tasks feed (y0, 0, …, 0)); the outputs are y(n Δt), n = 1 … N,
one per input sample, from ``odelab.solve(..., method="dopri5")`` with its per-sample step control and dense
output (the solver does not shorten a step to hit a sample time), differentiated through every step
(discretise-then-optimise). The inputs after the first are ignored: the model has no input path.

Choices the paper leaves open (ours):

* activation tanh (the paper names only the widths; torchdiffeq's ``ode_demo.py``, which its setup mirrors,
  uses tanh); w = 32 gives 2·32+32 + 32·32+32 + 32·2+2 = 1218 parameters for d = 2 (the paper: ≈1k);
* rtol = 1e-5, atol = 1e-6: four orders of magnitude below the error the model is judged on (test MSE ≈ 1e-2,
  i.e. errors ≈ 0.1 on states of size ≈ 1–2) and one to two above float32 round-off (≈ 1e-7 relative), where a
  tighter tolerance (torchdiffeq's defaults 1e-7 / 1e-9) would only add steps that round-off then rejects.
"""
from __future__ import annotations

import math

from torch import Tensor, nn

from ..solvers import solve


class NeuralODE(nn.Module):
    """dy/dt = MLP(y), y(0) = x[:, 0]; ``forward(x) -> (y(Δt), …, y(NΔt)) (batch, N, d), y(NΔt)``.

    ``predicts_outputs = True``: the outputs are already the predicted observation, so
    :class:`~odelab.models.heads.SequenceRegressor` puts no readout behind it. ``stats`` keeps the last forward
    pass's per-sample solver statistics (``steps``, ``accepted``, ``rejected``, ``nfe``)."""

    predicts_outputs = True

    def __init__(self, input_size: int, width: int = 32, dt: float = 1.0, rtol: float = 1e-5, atol: float = 1e-6,
                 method: str = "dopri5", max_steps: int = 10_000):
        super().__init__()
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise ValueError(f"width: expected a positive integer, got {width!r}")
        if isinstance(dt, bool) or not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt: expected a positive finite number, got {dt!r}")
        self.field = nn.Sequential(nn.Linear(input_size, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                                   nn.Linear(width, input_size))
        self.input_size = self.output_size = self.hidden_size = input_size
        self.width, self.dt, self.method = width, float(dt), method
        self.options = dict(rtol=rtol, atol=atol, max_steps=max_steps)
        self.stats: dict[str, Tensor] = {}

    def derivative(self, t, y: Tensor) -> Tensor:
        """f_θ(y) (autonomous: t is not used)."""
        return self.field(y)

    def forward(self, x: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``x`` (batch, N, d): y(0) = ``state`` if given, else x[:, 0]; returns y at t = Δt, …, NΔt and the last."""
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"x: expected (batch, time, {self.input_size}), got {tuple(x.shape)}")
        y0 = x[:, 0] if state is None else state
        t = [self.dt * n for n in range(x.shape[1] + 1)]
        solution = solve(self.derivative, y0, t, method=self.method, **self.options)
        self.stats = {k: v.detach() for k, v in solution.stats.items()}
        outputs = solution.y[:, 1:]
        return outputs, outputs[:, -1]

    def extra_repr(self) -> str:
        return f"dt={self.dt:g}, method={self.method!r}, rtol={self.options['rtol']:g}, atol={self.options['atol']:g}"


def node(input_size: int, hidden_size: int = 32, dt: float = 1.0, width: int | None = None, rtol: float = 1e-5,
         atol: float = 1e-6, method: str = "dopri5") -> NeuralODE:
    """The ``node`` preset: :class:`NeuralODE` with MLP width ``width`` if given, else ``hidden_size`` (so
    ``--hidden`` sets it; the paper's 32 is the default); ``dt`` = the time between input samples."""
    return NeuralODE(input_size, hidden_size if width is None else width, dt, rtol, atol, method)
