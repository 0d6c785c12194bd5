"""The fused fixed-step explicit RK steps (odelab.solvers.fused_fixed): the stage sums and the update in one C++
call each, the outputs written in place. The kernel adds the terms in the torch path's order with fused
multiply-adds, as torch.add(x, k, alpha=w) does on a CPU, so every value must be the torch path's, bit for bit:
ODEs with several blocks, inputs and jumps, delay systems with aligned and interpolated reads; against closed
forms; gradients through the torch path, also when only a field output shows that one is needed."""
import pytest
import torch

import odelab
from odelab.solvers import fused_fixed
from odelab.systems import ENSO, LEM, FitzHughNagumo, HarmonicOscillator, MackeyGlass

F64 = torch.float64


@pytest.fixture(scope="module", autouse=True)
def compiled():
    if not fused_fixed.LIBRARY.available():
        pytest.skip(f"the CPU kernels do not build here: {fused_fixed.LIBRARY.failure()}")


def _both(run):
    """(fused, torch path) results of ``run()``; asserts that the fused steps ran."""
    calls = []
    step = fused_fixed.FusedExplicitRK.step

    def counted(self, *args, **kwargs):
        calls.append(self.torch_path)
        return step(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused_fixed.FusedExplicitRK, "step", counted)
        fused = run()
    assert calls and not calls[0], "the fused steps did not run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused_fixed, "usable", lambda *args: False)
        plain = run()
    return fused, plain


def _identical(fused, plain):
    assert len(fused.ys) == len(plain.ys)
    for a, b in zip(fused.ys, plain.ys):
        assert a.shape == b.shape and a.dtype == b.dtype and a.is_contiguous()
        assert torch.equal(a, b)
    for key in ("steps", "accepted", "nfe"):
        assert torch.equal(fused.stats[key], plain.stats[key]), key
    assert torch.equal(fused.status, plain.status)


@pytest.mark.parametrize("method", ["euler", "midpoint", "heun", "rk4"])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_ode_same_bits(method, dtype):
    """Two blocks whose derivative returns one of the stage's own blocks (q' = p), outputs off the dt lattice."""
    p0, q0 = torch.randn(5, 3, dtype=dtype), torch.randn(5, 3, dtype=dtype)
    t = torch.tensor([0.0, 0.37, 1.0, 2.05, 3.0], dtype=F64)
    fused, plain = _both(lambda: odelab.solve(HarmonicOscillator(omega=1.7, dim=3), (p0, q0), t, method=method,
                                              dt=0.1))
    _identical(fused, plain)


@pytest.mark.parametrize("interpolation", ["hold", "linear"])
def test_inputs_and_jumps(interpolation):
    """LEM driven by an input (hold: f jumps at the samples; linear), a jump time inside a step, float64."""
    torch.manual_seed(0)
    system = LEM(2, 4)
    u = torch.randn(3, 7, 2, dtype=F64)
    y0 = (torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64))
    t = torch.linspace(0, 3, 13, dtype=F64)
    with torch.no_grad():
        fused, plain = _both(lambda: odelab.solve(system.double(), y0, t, u=u, u_times=torch.linspace(0, 3, 7),
                                                  interpolation=interpolation, jump_times=[1.234], method="rk4",
                                                  dt=0.2))
    _identical(fused, plain)


def test_plain_callable_and_odd_layouts():
    """A callable f(t, y) (tensor time) returning an expanded (non-contiguous) tensor part of the time; a
    non-contiguous y0."""
    y0 = torch.randn(4, 6, dtype=F64)[:, ::2]
    shift = torch.linspace(-1, 1, 3, dtype=F64)

    def f(t, y):
        return -y + torch.cos(t) * shift.expand(y.shape[0], 3)

    t = torch.linspace(0, 2, 9, dtype=F64)
    fused, plain = _both(lambda: odelab.solve(f, y0, t, method="rk4", dt=0.05))
    _identical(fused, plain)


def test_against_the_closed_form():
    """y' = A y (harmonic oscillator): N rk4 steps are R(hA)^N y0, R(Z) = I + Z + Z²/2 + Z³/6 + Z⁴/24."""
    omega, h, n = 2.0, 0.05, 80
    p0, q0 = torch.tensor([[0.3], [-1.0]], dtype=F64), torch.tensor([[1.0], [0.25]], dtype=F64)
    sol = odelab.solve(HarmonicOscillator(omega=omega), (p0, q0), torch.tensor([0.0, n * h], dtype=F64),
                       method="rk4", dt=h)
    Z = h * torch.tensor([[0.0, -omega**2], [1.0, 0.0]], dtype=F64)
    R = torch.eye(2, dtype=F64) + Z + Z @ Z / 2 + Z @ Z @ Z / 6 + Z @ Z @ Z @ Z / 24
    expected = torch.cat([p0, q0], 1) @ torch.linalg.matrix_power(R, n).T
    assert torch.allclose(torch.cat([sol["p"][:, -1], sol["q"][:, -1]], 1), expected, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("batch", [1, 64])
def test_delay_aligned_reads(batch):
    """ENSO and Mackey--Glass (delays multiples of dt: stage i reads stage i of an earlier step) from a constant
    and a callable history, float64 and float32, every node an output or a few."""
    for dtype in (F64, torch.float32):
        y0 = torch.rand(batch, 1, dtype=dtype)
        t = torch.linspace(0, 30, 301, dtype=F64)
        fused, plain = _both(lambda: odelab.solve(ENSO(), y0, t, method="rk4", dt=0.1))
        _identical(fused, plain)
        history = lambda s: 0.5 + 0.1 * torch.sin(s) * torch.ones(batch, 1, dtype=dtype)
        sparse = torch.tensor([0.0, 20.0, 55.5, 80.0], dtype=F64)
        fused, plain = _both(lambda: odelab.solve(MackeyGlass(), y0 + 0.5, sparse, method="heun", dt=0.25,
                                                  history=history))
        _identical(fused, plain)


def test_delay_interpolated_reads_and_jumps():
    """A delay that is no multiple of dt (cubic Hermite reads, left limits at a jump time)."""
    y0 = torch.rand(8, 1, dtype=F64)
    t = torch.linspace(0, 25, 51, dtype=F64)
    fused, plain = _both(lambda: odelab.solve(ENSO(delta=4.83), y0, t, method="rk4", dt=0.1, jump_times=[7.77]))
    _identical(fused, plain)


def test_delay_against_the_method_of_steps():
    """y'(t) = −y(t − 1), y = 1 before 0: y = 1 − t on [0, 1], 1 − t + (t − 1)²/2 on [1, 2] (polynomials: rk4 is
    exact on them, so the solve must be too)."""

    class Linear(MackeyGlass):
        def derivative(self, t, state, inp=None, *delayed):
            return (-delayed[0][0],)

    system = Linear(delta=1.0)
    t = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0], dtype=F64)
    sol = odelab.solve(system, torch.ones(2, 1, dtype=F64), t, method="rk4", dt=0.25, history=1.0)
    s = t.clone()
    expected = torch.where(s <= 1, 1 - s, 1 - s + (s - 1) ** 2 / 2)
    assert torch.allclose(sol.y[:, :, 0], expected.expand(2, -1), rtol=0, atol=1e-14)


def test_gradients_take_the_torch_path():
    """y0 requiring grad: no fused step runs; dy_N/dy0 = (1 + z + z²/2 + z³/6 + z⁴/24)^N for y' = λy."""
    lam, h, n = -0.7, 0.1, 30
    y0 = torch.tensor([[1.0], [2.0]], dtype=F64, requires_grad=True)
    calls = []
    step = fused_fixed.FusedExplicitRK.step
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused_fixed.FusedExplicitRK, "step", lambda self, *a, **k: calls.append(1) or step(self, *a, **k))
        sol = odelab.solve(lambda t, y: lam * y, y0, torch.tensor([0.0, n * h], dtype=F64), method="rk4", dt=h)
        sol.y[:, -1].sum().backward()
    assert not calls
    z = lam * h
    assert torch.allclose(y0.grad, torch.full_like(y0, (1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24) ** n), rtol=1e-13)


def test_gradient_through_an_input_falls_back():
    """An input that requires grad (the state and the system do not): the first field output shows it, that step
    and every later one take the torch path, and the gradient is the torch path's."""
    class Driven(HarmonicOscillator):
        def derivative(self, t, state, inp=None, *delayed):
            p, q = state
            return (-q + inp, p)

    u = torch.linspace(-1, 1, 6, dtype=F64).reshape(1, 6, 1).repeat(2, 1, 1).requires_grad_()
    y0 = (torch.zeros(2, 1, dtype=F64), torch.ones(2, 1, dtype=F64))
    t = torch.linspace(0, 2.5, 6, dtype=F64)
    grads, calls = [], []
    step = fused_fixed.FusedExplicitRK.step
    for fused_on in (True, False):
        u.grad = None
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fused_fixed.FusedExplicitRK, "step",
                          lambda self, *a, **k: calls.append(self.torch_path) or step(self, *a, **k))
            if not fused_on:
                patch.setattr(fused_fixed, "usable", lambda *args: False)
            sol = odelab.solve(Driven(), y0, t, u=u, u_times=t, method="rk4", dt=0.1)
            (sol["q"] ** 2).sum().backward()
        grads.append(u.grad.clone())
    assert calls[0] is False and all(calls[1:]) and len(calls) == 25  # the fused stepper ran, then fell back
    assert grads[0].abs().sum() > 0
    assert torch.equal(grads[0], grads[1])


def test_threads_give_the_same_result():
    """A state of ≥ PARALLEL_ELEMENTS elements splits the kernel's loop between threads: the same bits."""
    y0 = torch.rand(fused_fixed.PARALLEL_ELEMENTS // 2 + 3, 2, dtype=F64)
    t = torch.linspace(0, 1, 3, dtype=F64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        fused, plain = _both(lambda: odelab.solve(FitzHughNagumo(), y0, t, method="rk4", dt=0.1))
    finally:
        torch.set_num_threads(threads)
    _identical(fused, plain)


def test_unavailable_library_takes_the_torch_path():
    """Without the library (no compiler, ODELAB_CPU_KERNELS=0) the torch path runs: the same values."""
    y0, t = torch.rand(3, 1, dtype=F64), torch.linspace(0, 10, 11, dtype=F64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused_fixed.LIBRARY, "available", lambda: False)
        assert not fused_fixed.usable(odelab.solvers.schemes.FIXED_SCHEMES["rk4"], ENSO(), (y0,))
        plain = odelab.solve(ENSO(), y0, t, method="rk4", dt=0.1)
    assert fused_fixed.usable(odelab.solvers.schemes.FIXED_SCHEMES["rk4"], ENSO(), (y0,))
    assert torch.equal(plain.y, odelab.solve(ENSO(), y0, t, method="rk4", dt=0.1).y)
