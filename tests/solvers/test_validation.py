"""Malformed inputs give ValueError/TypeError naming the offending argument."""
import math

import pytest
import torch

import odelab
from odelab.systems import LEM

f = lambda t, y: -y
y0 = torch.ones(2, 3)
t = torch.linspace(0, 1, 5)


@pytest.mark.parametrize(
    "kwargs,error,name",
    [
        (dict(y0=torch.ones(3)), ValueError, "y0"),
        (dict(y0=torch.ones(2, 3, 4)), ValueError, "y0"),
        (dict(y0=torch.tensor([[1.0, math.nan, 0.0]])), ValueError, "y0"),
        (dict(y0=torch.tensor([[1.0, math.inf, 0.0]])), ValueError, "y0"),
        (dict(y0=[1.0, 2.0]), TypeError, "y0"),
        (dict(t=torch.tensor([0.0, 1.0, 1.0])), ValueError, "t"),
        (dict(t=torch.tensor([0.0, 2.0, 1.0])), ValueError, "t"),
        (dict(t=torch.tensor([[0.0, 1.0]])), ValueError, "t"),
        (dict(t=torch.tensor([0.0, math.nan])), ValueError, "t"),
        (dict(dt=0.0), ValueError, "dt"),
        (dict(dt=-0.1), ValueError, "dt"),
        (dict(dt=math.inf), ValueError, "dt"),
        (dict(dt=None), ValueError, "dt"),
        (dict(method="leapfrog-42"), ValueError, "method"),
        (dict(method=3), TypeError, "method"),
        (dict(system=42), TypeError, "system"),
        (dict(system=lambda t: t), TypeError, "system"),
    ],
)
def test_solve_rejects_malformed_arguments(kwargs, error, name):
    args = dict(system=f, y0=y0, t=t, method="rk4", dt=0.1)
    args.update(kwargs)
    system = args.pop("system")
    with pytest.raises(error, match=rf"^{name}\b"):
        odelab.solve(system, args.pop("y0"), args.pop("t"), **args)


g = lambda t, y, u: -y + u


@pytest.mark.parametrize(
    "u,error",
    [
        (torch.ones(2, 5), ValueError),  # missing feature axis
        (torch.ones(3, 5, 3), ValueError),  # wrong batch
        (torch.ones(2, 4, 3), ValueError),  # wrong number of samples
        (torch.full((2, 5, 3), math.nan), ValueError),
        (torch.full((2, 5, 3), -math.inf), ValueError),
        ("abc", TypeError),
    ],
)
def test_solve_rejects_malformed_inputs(u, error):
    with pytest.raises(error, match=r"^u\b"):
        odelab.solve(g, y0, t, u=u, method="rk4", dt=0.1)


def test_system_state_and_input_checks():
    lem = LEM(2, 4)
    good = lem.initial_state(3)
    with pytest.raises(ValueError, match=r"^y0"):
        odelab.solve(lem, good[:1], t, u=torch.zeros(3, 5, 2), method="imex", dt=0.1)
    with pytest.raises(ValueError, match=r"^y0"):
        odelab.solve(lem, (good[0], torch.zeros(4, 4)), t, u=torch.zeros(3, 5, 2), method="imex", dt=0.1)
    with pytest.raises(ValueError, match=r"^u\b"):
        odelab.solve(lem, good, t, u=torch.zeros(3, 5, 7), method="imex", dt=0.1)
    with pytest.raises(ValueError, match=r"^u\b"):
        odelab.solve(lem, good, t, method="imex", dt=0.1)
    with pytest.raises(ValueError, match=r"^interpolation"):
        odelab.solve(lem, good, t, u=torch.zeros(3, 5, 2), interpolation="cubic", method="imex", dt=0.1)
    with pytest.raises(ValueError, match=r"^method"):
        odelab.solve(lem, good, t, u=torch.zeros(3, 5, 2), method="symplectic-euler", dt=0.1)
    with pytest.raises(ValueError, match=r"^method: unknown 'rk45'; fixed-step \(with dt\): \[.*'rk4'.*adaptive.*'dopri5'"):
        odelab.solve(lambda t, y: -y, torch.ones(2, 1), t, method="rk45")  # scipy's name: both kinds are listed


def test_recurrent_checks():
    with pytest.raises(TypeError, match=r"^system"):
        odelab.Recurrent(lambda t, y: y, "imex", 1.0)
    with pytest.raises(ValueError, match=r"^dt"):
        odelab.Recurrent(LEM(1, 2), "imex", 0.0)
    with pytest.raises(ValueError, match=r"^method"):
        odelab.Recurrent(LEM(1, 2), "nope", 1.0)
    with pytest.raises(ValueError, match=r"^unfolds"):
        odelab.Recurrent(LEM(1, 2), "imex", 1.0, unfolds=0)
    cell = odelab.cells.LEM(2, 4)
    with pytest.raises(ValueError, match=r"^x\b"):
        cell(torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"^x\b"):
        cell(torch.zeros(3, 5, 1))
