"""Whole fixed-step solves replayed as CUDA graphs (``cuda_graph=True``, :mod:`odelab.solvers.cuda_graph`).

On CPU a stand-in takes the graph's place: capturing runs the solve's Python once (as a real capture does, recording
its kernels) and each replay runs that same closure again, over the static copy of y0 the capture saw. Both assert
that nothing is read on the host (a real capture fails on such a read). The replays' results must be each call's
own eager solve's, so a new y0 reaches the captured work only through the static copy."""
from __future__ import annotations

import warnings

import pytest
import torch

import odelab
from helpers import host_reads
from odelab.solvers import cuda_graph, fused_fixed
from odelab.systems import ENSO, VanDerPol

F64 = torch.float64


class _StandIn:
    """A CUDA graph's stand-in on CPU tensors (see the module docstring)."""

    captures = 0
    replays = 0

    def __init__(self, run):
        type(self).captures += 1
        self.run = run
        self._run()

    def _run(self):
        with host_reads() as reads, pytest.MonkeyPatch.context() as patch:
            patch.setattr(cuda_graph, "capturing", lambda: True)
            self.run()
        assert not reads, f"the captured solve read on the host: {reads}"

    def replay(self):
        type(self).replays += 1
        self._run()


@pytest.fixture
def stand_in():
    """cuda_graph=True on CPU tensors with :class:`_StandIn`; the torch path that CUDA takes (no C++ stage sums)."""
    _StandIn.captures = _StandIn.replays = 0
    cuda_graph.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cuda_graph, "DEVICES", ("cpu",))
        patch.setattr(cuda_graph, "capture", _StandIn)
        patch.setattr(fused_fixed, "usable", lambda *args: False)
        yield _StandIn
    cuda_graph.clear()


def _initial(seed: int, batch: int = 3, size: int = 1) -> torch.Tensor:
    return torch.randn(batch, size, dtype=F64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dt", [0.1, 0.07], ids=["aligned", "hermite"])
def test_delay_solve_replays_with_each_calls_initial_state(stand_in, dt):
    """ENSO (τ = 4.8) from a callable history, rk4: the first call runs eagerly, the second is captured, every later
    one replays it; each call's result is its own eager solve's, bit for bit (delayed reads on the step grid and,
    at dt = 0.07, between its points)."""
    system = ENSO()
    history = lambda s: 0.5 * torch.cos(s) + torch.zeros(3, 1, dtype=F64)
    t = torch.linspace(0, 12, 13, dtype=F64)
    solve = lambda y0, graph: odelab.solve(system, y0, t, method="rk4", dt=dt, history=history, cuda_graph=graph)
    for call in range(4):
        y0 = _initial(call)
        graphed, eager = solve(y0, True), solve(y0, False)
        assert torch.equal(graphed.y, eager.y)
        assert torch.equal(graphed.status, eager.status) and torch.equal(graphed.stats["nfe"], eager.stats["nfe"])
        assert graphed.ts is t
    assert stand_in.captures == 1 and stand_in.replays == 3


def test_ode_solve_replays_against_the_closed_form(stand_in):
    """y' = −λ y with per-sample λ held by a module, rk4: the solution after n steps is R(−λh)ⁿ y0 with rk4's
    stability polynomial R(z) = 1 + z + z²/2 + z³/6 + z⁴/24 (a closed form, not the solver's code); an in-place
    update of λ is seen by the replay (the graph reads the parameter where it is)."""

    class Decay(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rate = torch.nn.Parameter(torch.tensor([[0.5], [1.0], [2.0]], dtype=F64), requires_grad=False)

        def forward(self, t, y):
            return -self.rate * y

    system, dt = Decay(), 0.05
    t = torch.linspace(0, 2, 5, dtype=F64)
    steps = torch.arange(5, dtype=F64) * round(0.5 / dt)
    for call in range(4):
        if call == 3:
            with torch.no_grad():
                system.rate.mul_(1.5)
        y0 = _initial(10 + call)
        z = -system.rate.detach() * dt
        growth = 1 + z + z ** 2 / 2 + z ** 3 / 6 + z ** 4 / 24
        expected = growth ** steps * y0  # (3, 5): sample, output time
        solution = odelab.solve(system, y0, t, method="rk4", dt=dt, cuda_graph=True)
        torch.testing.assert_close(solution.y[..., 0], expected, rtol=1e-13, atol=0)
    assert stand_in.captures == 1 and stand_in.replays == 3


def test_a_new_configuration_is_captured_anew(stand_in):
    """Another step, output grid or batch size is another graph; a parameter replaced by another tensor too (the
    captured work would read the old one)."""
    system = VanDerPol(mu=1.0)
    y0 = torch.tensor([[2.0, 0.0], [1.0, 0.5]], dtype=F64)
    t = torch.linspace(0, 1, 3, dtype=F64)
    for dt, times, y in [(0.1, t, y0)] * 2 + [(0.05, t, y0)] * 2 + [(0.1, t[:2], y0)] * 2 + [(0.1, t, y0[:1])] * 2:
        graphed = odelab.solve(system, y, times, method="rk4", dt=dt, cuda_graph=True)
        assert torch.equal(graphed.y, odelab.solve(system, y, times, method="rk4", dt=dt).y)
    assert stand_in.captures == 4 and stand_in.replays == 4  # a capture replays once: its call's result

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(-torch.ones(1, 2, dtype=F64), requires_grad=False)

        def forward(self, t, y):
            return self.a * y

    linear = Linear()
    solve = lambda: odelab.solve(linear, y0, t, method="euler", dt=0.25, cuda_graph=True).y
    solve(), solve()
    linear.a = torch.nn.Parameter(-2 * torch.ones(1, 2, dtype=F64), requires_grad=False)
    torch.testing.assert_close(solve(), y0[:, None, :] * (1 - 0.5) ** torch.tensor([0, 2, 4], dtype=F64)[:, None],
                               rtol=1e-15, atol=0)
    assert stand_in.captures == 5


def test_a_failed_capture_warns_once_and_runs_eagerly(stand_in, monkeypatch):
    """A field that reads a value on the host cannot be captured: a warning, then that configuration's solves run
    eagerly with the same results."""
    field = lambda t, y: -y * float(y.abs().max())  # a host read
    y0 = torch.tensor([[1.0], [0.5]], dtype=F64)
    t = torch.linspace(0, 1, 3, dtype=F64)

    def failing(run):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cuda_graph, "capture", failing)
    eager = odelab.solve(field, y0, t, method="rk4", dt=0.1).y
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [odelab.solve(field, y0, t, method="rk4", dt=0.1, cuda_graph=True).y for _ in range(4)]
    assert sum("capturing the fixed-step solve" in str(w.message) for w in caught) == 1
    assert all(torch.equal(y, eager) for y in results)


def test_errors():
    y0 = torch.ones(2, 1, dtype=F64)
    t = torch.linspace(0, 1, 3, dtype=F64)
    with pytest.raises(TypeError, match="cuda_graph"):
        odelab.solve(lambda t, y: -y, y0, t, method="rk4", dt=0.1, cuda_graph="yes")
    with pytest.raises(ValueError, match="cuda_graph: replays a solve on the GPU, but y0 is on cpu"):
        odelab.solve(lambda t, y: -y, y0, t, method="rk4", dt=0.1, cuda_graph=True)
    with pytest.raises(ValueError, match="input u are not captured"):
        odelab.solve(lambda t, y, u: -y + u, y0, t, u=torch.ones(2, 3, 1, dtype=F64), method="rk4", dt=0.1,
                     cuda_graph=True)
    with pytest.raises(ValueError, match="records no gradient"):
        odelab.solve(lambda t, y: -y, y0.clone().requires_grad_(), t, method="rk4", dt=0.1, cuda_graph=True)


@pytest.mark.gpu
def test_captured_solves_on_the_gpu():
    """A real capture: ENSO (rk4, dt 0.1, 4096 trajectories) and Van der Pol; every call equals its eager solve."""
    cuda_graph.clear()
    system = ENSO()
    t = torch.linspace(0, 40, 41, dtype=F64, device="cuda")
    for call in range(4):
        y0 = _initial(call, batch=4096).cuda()
        graphed = odelab.solve(system, y0, t, method="rk4", dt=0.1, cuda_graph=True)
        torch.testing.assert_close(graphed.y, odelab.solve(system, y0, t, method="rk4", dt=0.1).y, rtol=0, atol=0)
    vdp = VanDerPol(mu=2.0).cuda()
    for call in range(3):
        y0 = _initial(call, batch=64, size=2).cuda()
        graphed = odelab.solve(vdp, y0, t[:11], method="rk4", dt=0.01, cuda_graph=True)
        torch.testing.assert_close(graphed.y, odelab.solve(vdp, y0, t[:11], method="rk4", dt=0.01).y, rtol=0, atol=0)
    cuda_graph.clear()
