"""Butcher tableaux of the explicit Runge--Kutta methods (fixed-step and embedded), and the Horner evaluation of an
embedded pair's continuous extension."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def horner(y: Tensor, coef: tuple[Tensor, ...], theta: Tensor, fused: bool = True) -> Tensor:
    """y + θ (C1 + θ (C2 + … θ Cm)): the continuous extension y + Σ_i b_i(θ) hk_i with C_p = Σ_i P_ip hk_i;
    θ broadcasts against y. ``fused=False`` for forward-mode tangents (addcmul's goes through a slow
    Python decomposition)."""
    multiply_add = torch.addcmul if fused else (lambda c, a, b: c + a * b)
    acc = coef[-1]
    for c in reversed(coef[:-1]):
        acc = multiply_add(c, theta, acc)
    return multiply_add(y, theta, acc)


@dataclass(frozen=True)
class ButcherTableau:
    """``c``, lower-triangular ``a`` (row i holds a_i0..a_i,i-1), weights ``b`` and, for embedded pairs,
    ``b_err`` = b − b̂ (the difference giving the local error estimate). ``fsal``: the last stage is
    f(t + dt, y_new), reusable as the next step's first stage. ``embedded_order``: order of b̂ (the error
    estimate is O(dt^(embedded_order + 1))). ``dense``: the continuous extension y(t + θ dt) = y + dt Σ_i b_i(θ) k_i,
    row i holding the coefficients of θ¹, θ², … of b_i(θ)."""

    name: str
    order: int
    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    b_err: tuple[float, ...] | None = None
    fsal: bool = False
    embedded_order: int | None = None
    dense: tuple[tuple[float, ...], ...] | None = None

    @property
    def stages(self) -> int:
        return len(self.b)


EULER = ButcherTableau("euler", 1, (0.0,), ((),), (1.0,))
MIDPOINT = ButcherTableau("midpoint", 2, (0.0, 0.5), ((), (0.5,)), (0.0, 1.0))
HEUN = ButcherTableau("heun", 2, (0.0, 1.0), ((), (1.0,)), (0.5, 0.5))
RK4 = ButcherTableau(
    "rk4", 4, (0.0, 0.5, 0.5, 1.0), ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6)
)


def _poly_mul(*factors: tuple[float, ...]) -> tuple[float, ...]:
    """Coefficients (constant first) of the product of polynomials given by their coefficients."""
    out = (1.0,)
    for f in factors:
        prod = [0.0] * (len(out) + len(f) - 1)
        for i, x in enumerate(out):
            for j, y in enumerate(f):
                prod[i + j] += x * y
        out = tuple(prod)
    return out


def _dense_rows(polys: list[tuple[float, ...]]) -> tuple[tuple[float, ...], ...]:
    """Rows of θ¹..θᵐ coefficients from full polynomials (constant term, which must vanish, dropped)."""
    degree = max(len(p) for p in polys) - 1
    return tuple(tuple(p[1:]) + (0.0,) * (degree - len(p) + 1) for p in polys)


def _dopri5_dense() -> tuple[tuple[float, ...], ...]:
    """Dormand--Prince 4th-order continuous extension (Hairer--Nørsett--Wanner I, §II.6; dopri5.f CONTD5):
    y(θ) = y0 + θ r2 + θ(1−θ) r3 + θ²(1−θ) r4 + θ²(1−θ)² r5 with r2 = y1 − y0, r3 = dt k1 − r2,
    r4 = r2 − dt k7 − r3, r5 = dt Σ d_i k_i; expanded into b_i(θ) polynomials."""
    b = DOPRI5_B
    d = (-12715105075 / 11282082432, 0.0, 87487479700 / 32700410799, -10690763975 / 1880347072,
         701980252875 / 199316789632, -1453857185 / 822651844, 69997945 / 29380423)
    first, last = (1.0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 1.0)
    polys = []
    for i in range(7):
        r2, r3, r5 = b[i], first[i] - b[i], d[i]
        r4 = r2 - last[i] - r3
        polys.append((0.0, r2 + r3, -r3 + r4 + r5, -r4 - 2 * r5, r5))
    return _dense_rows(polys)


DOPRI5_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
DOPRI5 = ButcherTableau(
    "dopri5", 5,
    c=(0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0),
    a=((), (1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
       (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
       (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
       DOPRI5_B[:6]),
    b=DOPRI5_B,
    # b − b̂ with b̂ = (5179/57600, 0, 7571/16695, 393/640, −92097/339200, 187/2100, 1/40)
    b_err=(71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40),
    fsal=True, embedded_order=4, dense=_dopri5_dense(),
)

TSIT5_B = (0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742, -3.290069515436081,
           2.324710524099774, 0.0)
TSIT5 = ButcherTableau(
    "tsit5", 5,
    c=(0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0),
    a=((), (0.161,), (-0.008480655492356989, 0.335480655492357),
       (2.897153057105493, -6.359448489975075, 4.3622954328695815),
       (5.325864828439257, -11.748883564062828, 7.4955393428898365, -0.09249506636175525),
       (5.86145544294642, -12.92096931784711, 8.159367898576159, -0.071584973281401, -0.028269050394068383),
       TSIT5_B[:6]),
    b=TSIT5_B,
    b_err=(-0.001780011052225771, -0.0008164344596567469, 0.007880878010261996, -0.1447110071732629,
           0.5823571654525552, -0.45808210592918697, 1 / 66),
    fsal=True, embedded_order=4,
    # Tsitouras (2011) continuous extension, b_i(θ) in factored form
    dense=_dense_rows([
        _poly_mul((0.0, -1.0530884977290216), (-1.3299890189751412, 1.0),
                  (0.7139816917074209, -1.4364028541716351, 1.0)),
        _poly_mul((0.0, 0.0, 0.1017), (1.2949852507374631, -2.1966568338249754, 1.0)),
        _poly_mul((0.0, 0.0, 2.490627285651252793), (1.57803468208092486, -2.38535645472061657, 1.0)),
        _poly_mul((0.0, 0.0, -16.54810288924490272), (-1.21712927295533244, 1.0), (-0.61620406037800089, 1.0)),
        _poly_mul((0.0, 0.0, 47.37952196281928122), (-1.203071208372362603, 1.0), (-0.658047292653547382, 1.0)),
        _poly_mul((0.0, 0.0, -34.87065786149660974), (-1.2, 1.0), (-0.666666666666666667, 1.0)),
        _poly_mul((0.0, 0.0, 2.5), (-1.0, 1.0), (-0.6, 1.0)),
    ]),
)

BOSH3_B = (2 / 9, 1 / 3, 4 / 9, 0.0)
BOSH3 = ButcherTableau(
    "bosh3", 3,
    c=(0.0, 1 / 2, 3 / 4, 1.0),
    a=((), (1 / 2,), (0.0, 3 / 4), BOSH3_B[:3]),
    b=BOSH3_B,
    b_err=(2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8),  # b − b̂, b̂ = (7/24, 1/4, 1/3, 1/8)
    fsal=True, embedded_order=2,
    # cubic Hermite through (y0, k1) and (y1, k4): b_i(θ) = (3θ² − 2θ³) b_i + (θ − 2θ² + θ³) δ_i1 + (θ³ − θ²) δ_i4
    dense=tuple((float(i == 0), 3 * bi - 2 * (i == 0) - (i == 3), -2 * bi + (i == 0) + (i == 3))
                for i, bi in enumerate(BOSH3_B)),
)

ADAPTIVE_TABLEAUX = {"dopri5": DOPRI5, "tsit5": TSIT5, "bosh3": BOSH3}
