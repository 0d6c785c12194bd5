"""The fused CPU loop of the adaptive solvers (odelab.solvers.fused_step): the arithmetic around the field in C++,
outputs written as steps are accepted. It must take the torch loop's steps (same accepted/rejected counts,
statuses, failure points) and agree with its values to round-off, for every tableau, both dtypes, inputs
(hold with jumps of f, linear: exact stage times), tstops, dt_max and failures; and against a closed form."""
import math

import pytest
import torch

import odelab
from helpers import assert_same_steps
from odelab.solvers import Status, fused_step, native
from odelab.systems import VanDerPol

F64 = torch.float64


@pytest.fixture(scope="module", autouse=True)
def compiled():
    if not fused_step.LIBRARY.available():
        pytest.skip(f"the CPU kernels do not build here: {fused_step.LIBRARY.failure()}")


def _both(run):
    """(fused, torch loop) results of ``run()`` without gradients; asserts the fused loop ran."""
    calls = []
    segment = fused_step.FusedLoop.segment

    def counted(self, *args):
        calls.append(1)
        return segment(self, *args)

    with torch.no_grad():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fused_step.FusedLoop, "segment", counted)
            fused = run()
        assert calls, "the fused loop did not run"
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fused_step, "usable", lambda *args: False)
            plain = run()
    return fused, plain


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3"])
def test_same_steps_as_the_torch_loop(method):
    """Per-sample stiffness (Van der Pol, μ from 0.1 to 6), samples failing at max_steps, a tstop and dt_max: the
    same steps in float64. (At μ = 20 bosh3's step count moves by a few steps under a 1e-15 change of y0 in the
    torch loop itself: there the controller's decisions amplify round-off, and no two summation orders agree.)"""
    mu = torch.tensor([0.1, 3.0, 6.0, 1.0, 0.5], dtype=F64)
    y0 = torch.tensor([[2.0, 0.0], [1.0, 0.5], [2.0, 0.0], [0.0, 1.0], [-1.0, 0.3]], dtype=F64)
    t = torch.linspace(0, 12, 25, dtype=F64)
    max_steps = {"dopri5": 120, "tsit5": 120, "bosh3": 700}[method]
    kw = dict(method=method, rtol=1e-6, atol=1e-8, max_steps=max_steps, throw=False, tstops=[5.1], dt_max=0.7)
    fused, plain = _both(lambda: odelab.solve(VanDerPol(mu=mu), y0, t, **kw))
    assert Status.MAX_STEPS in plain.status.tolist() and Status.SUCCESS in plain.status.tolist()
    assert_same_steps(fused, plain, atol=1e-9)


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "bosh3"])
def test_float32(method):
    """float32 (rtol 1e-4): the error estimate is a difference of stage sums whose float32 round-off is a few
    percent of it, so the two summation orders may take a few different steps (10 % at most here), with values
    within the tolerance of a float64 solution."""
    mu = torch.tensor([0.1, 3.0, 6.0, 1.0, 0.5])
    y0 = torch.tensor([[2.0, 0.0], [1.0, 0.5], [2.0, 0.0], [0.0, 1.0], [-1.0, 0.3]])
    t = torch.linspace(0, 12, 25)
    kw = dict(method=method, rtol=1e-4, atol=1e-6)
    fused, plain = _both(lambda: odelab.solve(VanDerPol(mu=mu), y0, t, **kw))
    with torch.no_grad():
        truth = odelab.solve(VanDerPol(mu=mu.double()), y0.double(), t.double(), rtol=1e-10, atol=1e-12).y
    assert fused.y.dtype == torch.float32
    assert ((fused.stats["steps"] - plain.stats["steps"]).abs() <= 0.1 * plain.stats["steps"]).all()
    for sol in (fused, plain):
        assert (sol.y.double() - truth).abs().max() < 0.05  # ≈ 1e-4 relative per step over ~100 steps, as the torch loop


@pytest.mark.parametrize("interpolation", ["hold", "linear"])
def test_inputs_and_jumps(interpolation):
    """Hold inputs (f jumps at every sample time: the first stage is re-evaluated there, the stages ending on a
    jump see the time one ulp before it) and linear inputs (stage times in float64), with per-sample tolerances
    met on a batch whose samples step differently."""
    generator = torch.Generator().manual_seed(0)
    u = torch.randn(6, 9, 2, generator=generator, dtype=F64)
    y0 = torch.randn(6, 2, generator=generator, dtype=F64)
    t = torch.linspace(0, 4, 9, dtype=F64)
    a = torch.tensor([[-0.5, 1.0], [-1.0, -0.3]], dtype=F64)
    field = lambda s, y, v: torch.tanh(y @ a + v) - 0.1 * y * s
    fused, plain = _both(lambda: odelab.solve(field, y0, t, u=u, interpolation=interpolation, rtol=1e-8, atol=1e-10,
                                              jump_times=[1.3]))
    assert_same_steps(fused, plain, atol=1e-12)


def test_against_the_closed_form():
    """y' = λ y with per-sample λ: y(t) = y0 e^{λ t} within the tolerance, at every output time (the outputs are
    the continuous extension of the step containing them, written as the step is accepted)."""
    lam = torch.linspace(-2.0, 0.5, 64, dtype=F64)
    y0 = torch.linspace(0.5, 1.5, 64, dtype=F64).unsqueeze(1)
    t = torch.linspace(0, 3, 301, dtype=F64)
    with torch.no_grad():
        sol = odelab.solve(lambda s, y: lam.unsqueeze(1) * y, y0, t, rtol=1e-10, atol=1e-12)
    exact = y0 * torch.exp(lam.unsqueeze(1) * t.unsqueeze(0))
    assert (sol.y[..., 0] - exact).abs().max() / exact.abs().max() < 1e-8
    assert torch.equal(sol.y[:, 0], y0)


def test_nonfinite_sample_fails_alone():
    """A sample that blows up (y' = y², y0 = 1: y = 1/(1 − t)) fails alone, with NaN outputs after its failure
    (the step underflows as h → 0 near t = 1), as in the torch loop; the others finish."""
    y0 = torch.tensor([[1.0], [0.25], [-0.5]], dtype=F64)
    t = torch.linspace(0, 2, 11, dtype=F64)
    fused, plain = _both(lambda: odelab.solve(lambda s, y: y ** 2, y0, t, throw=False))  # y = 1/(1/y0 − t): blows up
    assert fused.status.tolist() == [Status.STEP_UNDERFLOW, Status.SUCCESS, Status.SUCCESS]
    assert fused.y[0, 6:].isnan().all() and not fused.y[0, :6].isnan().any()
    assert_same_steps(fused, plain, atol=1e-7)  # relative: y ≈ 4e6 at t = 1, round-off amplified by the blow-up
    exact = 1.0 / (1.0 / y0[1:] - t)
    assert (fused.y[1:, :, 0] - exact).abs().max() < 1e-5


def test_gradients_use_the_torch_loop():
    """A solve that records gradients runs the torch loop (the kernels have no backward); y0 requiring grad."""
    y0 = torch.tensor([[1.0, 0.0]], dtype=F64, requires_grad=True)
    t = torch.linspace(0, 1, 5, dtype=F64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused_step.FusedLoop, "segment", lambda *args: pytest.fail("fused loop under autograd"))
        sol = odelab.solve(VanDerPol(mu=torch.tensor(1.0, dtype=F64)), y0, t)
    (grad,) = torch.autograd.grad(sol.y[:, -1, 0].sum(), y0)
    assert torch.isfinite(grad).all()


def test_failed_build_falls_back(monkeypatch):
    """No compiler: one warning, and the solve runs the torch loop with the same result."""
    y0 = torch.tensor([[1.0, 0.0]], dtype=F64)
    t = torch.linspace(0, 1, 5, dtype=F64)
    system = VanDerPol(mu=torch.tensor(1.0, dtype=F64))
    with torch.no_grad():
        reference = odelab.solve(system, y0, t)
        monkeypatch.setattr(fused_step.LIBRARY, "_done", False)
        monkeypatch.setattr(fused_step.LIBRARY, "_library", None)
        monkeypatch.setattr(fused_step.LIBRARY, "_failure", None)
        monkeypatch.setattr(native, "compiler", lambda: None)
        with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
            fallback = odelab.solve(system, y0, t)
    assert torch.allclose(fallback.y, reference.y, rtol=0, atol=1e-12)
    assert not math.isnan(fallback.y.sum().item())


def test_threads_give_the_same_result():
    """A state of ≥ 2^16 elements splits the kernels' loops between torch's threads (OpenMP): elementwise work and
    per-sample reductions are unchanged, so the result is bitwise the serial one."""
    generator = torch.Generator().manual_seed(1)
    y0 = torch.randn(fused_step.PARALLEL_ELEMENTS // 2 + 3, 2, generator=generator, dtype=F64)
    t = torch.linspace(0, 2, 5, dtype=F64)
    system = VanDerPol(mu=torch.rand(y0.shape[0], generator=generator, dtype=F64) * 3)
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            with torch.no_grad():
                results.append(odelab.solve(system, y0, t, rtol=1e-6, atol=1e-8))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(results[0].y, results[1].y)
    assert torch.equal(results[0].stats["steps"], results[1].stats["steps"])


def test_optional_flags_are_dropped_when_they_fail(tmp_path, monkeypatch):
    """A compiler that rejects an optional flag (OpenMP missing) builds the library without it, once: the failed
    build leaves a marker that the next build reads instead of compiling again."""
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path))
    source = 'extern "C" int answer() { return 42; }\n'
    library = native.NativeLibrary("odelab_test", source, optional_flags=("-fno-such-option-odelab",))
    assert library.available(), library.failure()
    assert library.library().answer() == 42
    assert "-fno-such-option-odelab" not in library.flags
    assert len(list((tmp_path / "torch_extensions").glob("odelab_test_*.failed"))) == 1
    again = native.NativeLibrary("odelab_test", source, optional_flags=("-fno-such-option-odelab",))
    assert again.available() and again.build_seconds is None  # loaded, nothing compiled


@pytest.mark.parametrize("batch", [1, 16])
def test_delay_systems(batch):
    """Mackey–Glass (τ = 17) from per-sample constant histories: the dense history reads the rings of accepted
    steps the finish kernel fills (one sample, one state: the smallest layout). Same steps as the torch loop,
    values to round-off."""
    from odelab.systems import MackeyGlass

    y0 = torch.linspace(0.5, 1.2, batch, dtype=F64).unsqueeze(1)
    t = torch.linspace(0, 120, 61, dtype=F64)
    fused, plain = _both(lambda: odelab.solve(MackeyGlass(), y0, t, history=y0, rtol=1e-7, atol=1e-9))
    # round-off grows over the 120 time units of this oscillation: from t ≈ 36 (the history's breakpoints) one sample's
    # difference climbs from 1e-16 to 1.1e-8 on a machine whose torch kernels round differently from the compiled
    # loop's (2026-11-26; 1e-8 held on earlier machines), so the values are held to the solve's rtol, 1e-7
    assert_same_steps(fused, plain, atol=1e-7)


def test_delay_history_rings_grow_and_right_limits():
    """ENSO (τ = 4.8) from a callable history that differs from y0 at t0 (f jumps at t0 + τ: the re-evaluated first
    stage reads y0 there, a right limit), at a tolerance whose steps need more records within τ than a ring first
    holds (it doubles): the torch loop's steps, and the same values to round-off."""
    from odelab.systems import ENSO

    grown, rights = [], []
    grow, at = fused_step.NativeHistory.grow, fused_step.NativeHistory.at
    y0 = torch.tensor([[0.3], [0.9], [-0.4]], dtype=F64)
    history = lambda s: 0.5 * torch.cos(s) + torch.zeros(3, 1, dtype=F64)
    t = torch.linspace(0, 30, 31, dtype=F64)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fused_step.NativeHistory, "grow", lambda self: grown.append(self.window) or grow(self))
        patch.setattr(fused_step.NativeHistory, "at", lambda self, s, right=False: rights.append(right) or at(self, s, right))
        fused, plain = _both(lambda: odelab.solve(ENSO(), y0, t, history=history, rtol=1e-9, atol=1e-11))
    assert grown and grown[0] == 16 and any(rights)
    assert_same_steps(fused, plain, atol=1e-10)


def test_native_history_reads_its_records():
    """rk_history against the closed form of the records it holds: two steps of a sample whose continuous extension
    is y + θ C1 + θ² C2 (dopri5's m = 4 coefficients, the others zero); reads before t0 return φ, and a read at a
    step boundary takes the step ending there (left) or the one starting there (right)."""
    from odelab.solvers.adaptive import _Integrator, _Options
    from odelab.solvers.tableau import ADAPTIVE_TABLEAUX
    from odelab.systems import MackeyGlass

    y0 = torch.tensor([[1.5], [2.5]], dtype=F64)  # φ: differs from every record's state
    tableau = ADAPTIVE_TABLEAUX["dopri5"]
    solver = _Integrator(tableau, MackeyGlass(delta=1.0), y0, [1], [0.0, 3.0], None, None, _Options(tableau))
    ring = fused_step.NativeHistory(solver, fused_step.LIBRARY.library().rk_history)
    # sample 0: steps [0, 0.5] and [0.5, 1.25]; sample 1: one step [0, 1]
    records = {0: [(0.0, 0.5, 1.0, 0.2, -0.1), (0.5, 0.75, 1.07, 0.3, 0.05)], 1: [(0.0, 1.0, 2.0, -1.0, 0.5)]}
    for b, steps in records.items():
        for n, (start, length, y, c1, c2) in enumerate(steps):
            ring.start[b, n], ring.length[b, n], ring.end[b, n] = start, length, start + length
            ring.y[b, n, 0] = y
            ring.coef[b, n, 0, :2] = torch.tensor([c1, c2], dtype=F64)
        ring.count[b] = len(steps)

    def expected(b, s, right=False):
        for start, length, y, c1, c2 in records[b]:
            end = start + length
            if (s < end) if right else (s <= end):
                theta = (s - start) / length
                return y + theta * c1 + theta**2 * c2
        raise AssertionError

    for s, right in [(0.25, False), (0.5, False), (0.5, True), (1.0, False), (-0.3, False), (0.0, True)]:
        got = ring.at(torch.tensor([s, s], dtype=F64), right)
        for b in (0, 1):
            before = (s < 0) if right else (s <= 0)  # the constant history φ = y0 (per sample)
            want = float(y0[b]) if before else expected(b, s, right)
            assert abs(float(got[b, 0]) - want) <= 1e-15, (s, right, b)
