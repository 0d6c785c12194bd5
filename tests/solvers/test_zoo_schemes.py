"""Every zoo system under every fixed scheme that applies (finite outputs, right shapes, through odelab.solve
and Recurrent), and a clear ValueError naming ``method`` for the schemes that do not apply."""
import pytest
import torch

from odelab import Recurrent, solve
from odelab.solvers import FIXED_SCHEMES
from odelab.systems import GRU, LRC, LTC, STC, CoRNN, NeuralOscillator, UnICORNN

INPUTS, HIDDEN, BATCH = 2, 5, 3
EXPLICIT = {"euler", "midpoint", "heun", "rk4"}
SYSTEMS = {
    # name: (constructor, schemes that apply)
    "cornn": (lambda: CoRNN(INPUTS, HIDDEN, gamma=2.0, epsilon=3.0),
              EXPLICIT | {"imex", "imex-implicit", "imex-reversed", "symplectic-euler"}),
    "unicornn": (lambda: UnICORNN(INPUTS, HIDDEN, alpha=1.0), EXPLICIT | {"imex", "imex-reversed", "symplectic-euler"}),
    "oscillator": (lambda: NeuralOscillator(INPUTS, HIDDEN), EXPLICIT | {"imex", "imex-reversed", "symplectic-euler"}),
    "ltc": (lambda: LTC(INPUTS, HIDDEN), EXPLICIT | {"imex", "imex-implicit"}),
    "stc": (lambda: STC(INPUTS, HIDDEN), EXPLICIT | {"imex", "imex-implicit"}),
    "lrc-a": (lambda: LRC(INPUTS, HIDDEN, "asymmetric"), EXPLICIT | {"imex", "imex-implicit"}),
    "lrc-s": (lambda: LRC(INPUTS, HIDDEN, "symmetric"), EXPLICIT | {"imex", "imex-implicit"}),
    "gru": (lambda: GRU(INPUTS, HIDDEN), EXPLICIT | {"imex", "imex-implicit"}),
}
CASES = [(name, scheme) for name in SYSTEMS for scheme in sorted(FIXED_SCHEMES)]


@pytest.mark.parametrize("name, scheme", CASES)
def test_system_under_scheme(name, scheme):
    torch.manual_seed(0)
    build, applicable = SYSTEMS[name]
    system = build()
    t = torch.linspace(0.0, 1.0, 6)
    u = torch.randn(BATCH, len(t), INPUTS)
    y0 = tuple(0.1 * x for x in system.initial_state(BATCH))
    if scheme not in applicable:
        with pytest.raises(ValueError, match="method"):
            solve(system, y0, t, u=u, method=scheme, dt=0.1)
        return
    sol = solve(system, y0, t, u=u, method=scheme, dt=0.1)
    assert sol.blocks == system.blocks
    for y in sol.ys:
        assert y.shape == (BATCH, len(t), HIDDEN) and torch.isfinite(y).all()
    assert bool(sol.success.all())
    outputs, final = Recurrent(system, scheme, 0.1)(u)
    assert outputs.shape == (BATCH, len(t), HIDDEN) and torch.isfinite(outputs).all()
    assert len(final) == len(system.blocks)
    outputs.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in system.parameters())


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_partitioned_and_explicit_schemes_converge_to_the_same_solution(name):
    """The published cells are first-order schemes of one field: as dt → 0 they meet rk4's solution."""
    torch.manual_seed(1)
    system = SYSTEMS[name][0]().double()
    t = torch.linspace(0.0, 1.0, 3, dtype=torch.float64)
    u = lambda _t: torch.full((BATCH, INPUTS), 0.3, dtype=torch.float64)
    y0 = tuple(0.1 * torch.randn(BATCH, HIDDEN, dtype=torch.float64) for _ in system.blocks)
    exact = solve(system, y0, t, u=u, method="rk4", dt=1e-3).ys
    for scheme in sorted(SYSTEMS[name][1] - {"rk4"}):
        errors = [max((a - b).abs().max().item() for a, b in zip(solve(system, y0, t, u=u, method=scheme, dt=dt).ys, exact))
                  for dt in (0.02, 0.01)]
        assert errors[1] < 0.75 * errors[0] or errors[1] < 1e-9, (scheme, errors)  # at least first order
