"""Host reads inside the solver loops. On CUDA every read of a tensor's value on the host (and every tensor built
from host data) waits for the stream to drain, so the loops that run there must not do it per step: the fixed-step
drivers (ODE and DDE, the torch path that CUDA takes) read nothing per step, the adaptive torch loop reads once per
``chunk`` attempts. Counted on CPU tensors (:func:`helpers.host_reads`), where the same ops run."""
from __future__ import annotations

import pytest
import torch

import odelab
from helpers import host_reads
from odelab.solvers import fused_fixed, fused_step
from odelab.systems import ENSO, LEM, VanDerPol

F64 = torch.float64


@pytest.fixture(autouse=True)
def torch_paths():
    """The loops CUDA runs: the CPU engines' kernels switched off."""
    with torch.no_grad(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused_fixed, "usable", lambda *args: False)
        patch.setattr(fused_step, "usable", lambda *args: False)
        yield


def _reads(run) -> list:
    with host_reads() as reads:
        run()
    return reads


def test_the_counter_sees_reads():
    x = torch.ones(3)
    reads = _reads(lambda: (bool(x.any()), x.sum().item(), x.tolist(), torch.tensor([1.0])))
    assert len(reads) == 4


@pytest.mark.parametrize("dense", [False, True], ids=["outputs", "dense"])
def test_fixed_step_ode_reads_nothing_per_step(dense):
    """LEM with a hold input and a jump time, rk4: the same reads (the set-up's) for 100 and 1000 steps (also when
    every step's Hermite data are kept for a dense output)."""
    torch.manual_seed(0)
    system = LEM(2, 8).double()
    u = torch.randn(4, 11, 2, dtype=F64)
    y0 = tuple(torch.zeros(4, 8, dtype=F64) for _ in range(2))
    t = torch.linspace(0, 10, 11, dtype=F64)
    counts = [len(_reads(lambda dt=dt: odelab.solve(system, y0, t, u=u, method="rk4", dt=dt, jump_times=[3.3],
                                                    dense=dense)))
              for dt in (0.1, 0.01)]
    assert counts[0] == counts[1] <= 8


@pytest.mark.parametrize("dense", [False, True], ids=["outputs", "dense"])
@pytest.mark.parametrize("dt", [0.1, 0.07], ids=["aligned", "hermite"])
def test_fixed_step_delay_reads_nothing_per_step(dt, dense):
    """ENSO (τ = 4.8) with a callable history, rk4: delayed reads on the step grid (dt = 0.1) or between its points
    (dt = 0.07, Hermite interpolation of the step records); 10× the steps, the same reads."""
    y0 = torch.tensor([[0.3], [0.9]], dtype=F64)
    history = lambda s: 0.5 * torch.cos(s) + torch.zeros(2, 1, dtype=F64)
    counts = [len(_reads(lambda end=end: odelab.solve(ENSO(), y0, torch.linspace(0, end, 11, dtype=F64),
                                                      method="rk4", dt=dt, history=history, dense=dense)))
              for end in (10.0, 100.0)]
    assert counts[0] == counts[1] <= 8


@pytest.mark.parametrize("dense", [False, True], ids=["outputs", "dense"])
@pytest.mark.parametrize("chunk", [4, 8])
def test_adaptive_torch_loop_reads_once_per_chunk(chunk, dense):
    """Van der Pol, dopri5: from [0, 10] to [0, 40] the attempts grow by ~435 and the reads by one per chunk."""
    y0 = torch.tensor([[2.0, 0.0], [1.0, 0.5]], dtype=F64)
    runs = []
    for end in (10.0, 40.0):
        with host_reads() as reads:
            solution = odelab.solve(VanDerPol(mu=2.0), y0, torch.linspace(0, end, 11, dtype=F64), chunk=chunk,
                                    dense=dense)
        runs.append((len(reads), int(solution.stats["steps"].max())))
    (short_reads, short_steps), (long_reads, long_steps) = runs
    assert long_steps - short_steps > 400
    assert long_reads - short_reads <= (long_steps - short_steps) // chunk + 2


def test_reading_a_dense_solution_as_history_reads_nothing():
    """A delay solve continuing a dense solution reads it at every stage (the adaptive methods batch-wide): each read
    costs no host read (its span is checked once, when the solve begins). Before: three per read."""
    from odelab.solvers.history import SolutionHistory

    first = odelab.solve(ENSO(), torch.tensor([[0.3], [0.9]], dtype=F64), [0.0, 20.0], rtol=1e-6, atol=1e-8,
                         dense=True)
    history = SolutionHistory(first, 20.0, 4.8)
    times, shared = torch.tensor([[16.1], [19.5]], dtype=F64), torch.tensor(17.0, dtype=F64)
    with host_reads() as reads:
        history(times)
        history(shared)
    assert not reads
