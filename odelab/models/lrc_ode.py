"""The LRC as the vector field of a neural ODE in observation space: the LRC model of the LRC paper's Neural-ODE
benchmarks (Farsang et al. 2024, §4.3: "an input mapping layer (2→16), an LRC with 16 hidden states connected all
to all, and an output mapping layer (16→2)", "units of 16, 16, 2", explicit Euler).

The paper does not say how the three layers are wired; the authors' code does (github.com/MoniFarsang/LRC,
``neuralODE/ode_model.py`` ``ODEFunc`` + ``neuralODE/lrc_ar_cell.py`` ``LRC_AR_Cell``, "input is the state"): the
observation y itself is the ODE state, and the derivative is the LRC field evaluated at the mapped observation,
mapped back,

    dy/dt = W_out · F_LRC(z) + b_out,   z = W_in · y + b_in,
    F_LRC(z) = ε(w) ⊙ (−σ(f) ⊙ z + tanh(u) ⊙ e_l),   f, u, w of eqs. 1, 3–5 over the presynaptic values z (no input),

integrated with explicit Euler on the sample grid (torchdiffeq/tfdiffeq ``odeint(..., method="euler")``: one step of
Δt = the sample spacing per sample), y(0) = the first input sample. The LRC field is
:class:`odelab.systems.LRC` unchanged (``input_size=0``, autonomous), so this is the published field with other
wiring, not a new cell; the recurrent LRCU (the field's own state h, Δt = 1 per sample) is
:func:`odelab.models.cells.LRCU`.

Why it matters (odelab spiral, paper preset, seed 1234, test MSE over 32 rollouts of 999 steps): the recurrent
LRCU-A reads (y0, 0, …, 0) into a zero state and stays at the mean predictor (0.40; with lr 1e-2 it fits the 15-step
training windows, MSE 0.06 over steps 1–15, and diverges right after them, 2.0 over steps 16–100), while this model,
whose state is the observation, learns a time-invariant field from the same windows: 0.0027 (the MLP neural ODE
``node``: 0.041).

Deviations from the authors' code (ours): the field's parameters keep odelab's positivity (softplus) and
initialisation (the code initialises the update weights k orthogonally and clips g ≥ 0); ``unfolds`` > 1 Euler
sub-steps per sample are allowed (the code: 1). The inputs after the first are ignored (no input path), as in
:class:`~odelab.models.neural_ode.NeuralODE`. (The authors' ``run_ode.py`` also differs from the paper's Table 3 and
from odelab's tasks: Adam instead of RMSprop, an L1 loss, and training windows cut from the one trajectory it tests on.)
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .. import systems


class LRCODE(nn.Module):
    """dy/dt = W_out F_LRC(W_in y + b_in) + b_out, y(0) = x[:, 0], explicit Euler with ``unfolds`` steps of
    dt/unfolds per sample; ``forward(x) -> (y(Δt), …, y(NΔt)) (batch, N, d), y(NΔt)``.

    ``predicts_outputs = True``: the outputs are the predicted observation (no readout behind it)."""

    predicts_outputs = True

    def __init__(self, input_size: int, hidden_size: int = 16, elastance: str = "asymmetric", dt: float = 1.0,
                 unfolds: int = 1):
        super().__init__()
        if not (isinstance(dt, (int, float)) and dt > 0):
            raise ValueError(f"dt: expected a positive number, got {dt!r}")
        if not (isinstance(unfolds, int) and not isinstance(unfolds, bool) and unfolds >= 1):
            raise ValueError(f"unfolds: expected a positive integer, got {unfolds!r}")
        self.encoder = nn.Linear(input_size, hidden_size)
        self.system = systems.LRC(0, hidden_size, elastance)
        self.decoder = nn.Linear(hidden_size, input_size)
        self.input_size = self.output_size = input_size
        self.hidden_size = hidden_size
        self.dt, self.unfolds = float(dt), unfolds

    def derivative(self, t, y: Tensor) -> Tensor:
        """W_out F_LRC(W_in y + b_in) + b_out (autonomous: t is not used)."""
        z = self.encoder(y)
        return self.decoder(self.system.block_derivative(0, t, (z,), None))

    def forward(self, x: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``x`` (batch, N, d): y(0) = ``state`` if given, else x[:, 0]; returns y at t = Δt, …, NΔt and the last."""
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(f"x: expected (batch, time, {self.input_size}), got {tuple(x.shape)}")
        y = x[:, 0] if state is None else state
        h = self.dt / self.unfolds
        outputs = []
        for n in range(x.shape[1]):
            for k in range(self.unfolds):
                y = y + h * self.derivative((n * self.unfolds + k) * h, y)
            outputs.append(y)
        return torch.stack(outputs, 1), y

    def extra_repr(self) -> str:
        return f"dt={self.dt:g}, unfolds={self.unfolds}"


def lrc_ode(input_size: int, hidden_size: int = 16, elastance: str = "asymmetric", dt: float = 1.0,
            unfolds: int = 1) -> LRCODE:
    """A preset constructor ``(input_size, hidden_size, **keywords)``: :class:`LRCODE`."""
    return LRCODE(input_size, hidden_size, elastance, dt, unfolds)
