"""Classical delay differential equations (no learnable parameters): one state block ``x`` of shape
``(batch, 1)`` and one constant delay δ. Solve them with ``odelab.solve(..., history=...)``; the default
history is the constant y0, which is how the τ-GRU paper starts both (Erichson et al. 2025, §5 and App. F.3: "frozen delayed
term on [0, δ]" = a constant history T(0) on [−δ, 0]).

Parameters are floats or tensors broadcastable to ``(batch, 1)`` (one value per sample).
"""
from __future__ import annotations

import torch

from .base import State, System


class _ScalarDelay(System):
    blocks = ("x",)
    observable = "x"
    hidden_size = 1

    def __init__(self, delta: float):
        super().__init__()
        if not isinstance(delta, (int, float)) or not delta > 0:
            raise ValueError(f"delta: expected a positive delay, got {delta!r}")
        self.delta = float(delta)

    @property
    def delays(self) -> tuple[float, ...]:
        return (self.delta,)


class ENSO(_ScalarDelay):
    """ENSO delay oscillator (Erichson et al. 2025, eq. 20, after Falkena et al. 2019 eq. 46), x = T the sea-surface
    temperature anomaly:

        T' = T − T³ − c T(t − δ) (1 − γ T(t − δ)²)                                   (20)

    Defaults c = 0.93, γ = 0.49, δ = 4.8 (Erichson et al. 2025, §5); the orbit is a limit cycle |T| ≤ 1.166, period ≈ 26.1.
    """

    def __init__(self, c=0.93, gamma=0.49, delta: float = 4.8):
        super().__init__(delta)
        self.c, self.gamma = c, gamma

    def derivative(self, t, state: State, inp=None, *delayed: State) -> State:
        T, T_delayed = state[0], delayed[0][0]
        local = torch.addcmul(T, T * T, T, value=-1.0)  # T − T³
        # − c T(t−δ) (1 − γ T(t−δ)²) = T(t−δ) (c γ T(t−δ)² − c), written with fused ops (a hot loop)
        return (torch.addcmul(local, T_delayed, (T_delayed * T_delayed) * (self.c * self.gamma) - self.c),)


class MackeyGlass(_ScalarDelay):
    """Mackey--Glass equation (Erichson et al. 2025, eq. 89):

        x' = a x(t − δ) / (1 + x(t − δ)ⁿ) − b x                                      (89)

    Defaults a = 0.2, b = 0.1, n = 10, δ = 17 (Erichson et al. 2025, App. F.3): chaotic, x ∈ [0.42, 1.32].
    """

    def __init__(self, a=0.2, b=0.1, n=10, delta: float = 17.0):
        super().__init__(delta)
        self.a, self.b, self.n = a, b, n

    def derivative(self, t, state: State, inp=None, *delayed: State) -> State:
        x, x_delayed = state[0], delayed[0][0]
        return (self.a * x_delayed / (1 + x_delayed**self.n) - self.b * x,)


__all__ = ["ENSO", "MackeyGlass"]
