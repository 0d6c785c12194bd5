"""The generic ODE → one-step-prediction builder and the Lorenz-63 / Lorenz-96 tasks, against independent
references: matrix exponentials, the written equations, a hand-computed stencil, energy decay, the Lorenz
absorbing sphere, a tight scipy solve of each input/target pair; and ``odelab fit lorenz63`` end to end."""
import json

import numpy as np
import pytest
import scipy.linalg
import torch
from scipy.integrate import solve_ivp

import odelab.data.ode_series
import odelab.data.tasks
from odelab.cli import main
from odelab.data.ode_series import lorenz63, lorenz96, one_step_dataset
from odelab.systems import HarmonicOscillator, Lorenz63, Lorenz96

TINY = (("train", 4), ("valid", 2), ("test", 3))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def lorenz63_rhs(t, s, sigma=10.0, rho=28.0, beta=8.0 / 3.0):  # Lorenz 1963, eq. 25--27
    x, y, z = s
    return [sigma * (y - x), x * (rho - z) - y, x * y - beta * z]


def initial(rng, sizes, dim, scale=1.0):
    return {name: scale * rng.standard_normal((n, dim)) for name, n in sizes}


def test_builder_samples_a_linear_ode_exactly():
    """x' = A x: x(t) = expm(A t) x0 at t = transient + k Δ, one pair shifted by one sample."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((3, 3)) - 1.5 * np.eye(3)
    states = initial(rng, TINY, 3)
    A_T = torch.tensor(A.T)
    data = one_step_dataset(lambda t, y: y @ A_T, states, t_end=2.5, samples=21, transient=0.5)
    times = np.linspace(0.5, 2.5, 21)
    for name, n in TINY:
        x, y = data[name]
        assert x.dtype == y.dtype == torch.float32 and x.shape == y.shape == (n, 20, 3)
        assert torch.equal(x[:, 1:], y[:, :-1])  # target n is input n + 1
        exact = np.stack([[scipy.linalg.expm(A * t) @ x0 for t in times] for x0 in states[name]])
        assert np.abs(x.numpy() - exact[:, :-1]).max() < 1e-6 and np.abs(y.numpy() - exact[:, 1:]).max() < 1e-6
    assert data["meta"]["sample_dt"] == pytest.approx(0.1) and data["meta"]["offset"] == [0.0] * 3


def test_builder_concatenates_the_blocks_of_a_system_and_keeps_the_observed_components():
    """The harmonic oscillator's state (p, q): (p, q)' = [[0, −ω²], [1, 0]] (p, q); only q observed."""
    rng = np.random.default_rng(1)
    states = initial(rng, TINY, 2)
    data = one_step_dataset(HarmonicOscillator(omega=2.0), states, t_end=3.0, samples=31, observed=[1], names=["q"])
    A = np.array([[0.0, -4.0], [1.0, 0.0]])
    exact = np.stack([[(scipy.linalg.expm(A * t) @ s)[1] for t in np.linspace(0, 3, 31)] for s in states["test"]])
    x, y = data["test"]
    assert x.shape == (3, 30, 1) and np.abs(y[..., 0].numpy() - exact[:, 1:]).max() < 1e-6
    assert data["meta"]["components"] == ["q"] and data["meta"]["observed"] == [1]


@pytest.mark.parametrize("mode", ["component", "pooled"])
def test_standardisation_uses_the_training_split_only(mode):
    rng = np.random.default_rng(2)
    states = initial(rng, TINY, 2, scale=3.0)
    system = lambda t, y: torch.stack((y[:, 1], -y[:, 0] - 0.1 * y[:, 1] + 2.0), -1)  # damped, shifted oscillator
    raw = one_step_dataset(system, states, t_end=4.0, samples=41)
    data = one_step_dataset(system, states, t_end=4.0, samples=41, standardise=mode)
    train = torch.cat([raw["train"][0], raw["train"][1][:, -1:]], 1).double()  # every training sample once
    dims = (0, 1) if mode == "component" else (0, 1, 2)
    mean, std = train.mean(dims).expand(2), train.std(dims).expand(2)
    assert np.allclose(data["meta"]["offset"], mean) and np.allclose(data["meta"]["scale"], std)
    for name in ("train", "valid", "test"):
        for raw_part, part in zip(raw[name], data[name]):
            assert torch.allclose(part.double(), (raw_part.double() - mean) / std, atol=1e-5)
    other_test = {**states, "test": 10.0 * states["test"]}  # other test states, same training statistics
    assert one_step_dataset(system, other_test, 4.0, 41, standardise=mode)["meta"]["offset"] == data["meta"]["offset"]


def test_lorenz63_field_matches_the_equations():
    rng = np.random.default_rng(3)
    points = rng.uniform(-30, 30, (9, 3))
    for params in ({}, dict(sigma=7.0, rho=13.5, beta=1.5)):
        (out,) = Lorenz63(**params).derivative(0.0, (torch.tensor(points),))
        expected = np.array([lorenz63_rhs(0.0, p, **params) for p in points])
        assert out.shape == (9, 3) and np.abs(out.numpy() - expected).max() < 1e-12


def test_lorenz96_cyclic_stencil_at_a_hand_computed_point():
    """N = 5, x = (1, …, 5), F = 8: x_i' = (x_{i+1} − x_{i−2}) x_{i−1} − x_i + F, e.g. x_0' = (2 − 4)·5 − 1 + 8."""
    (out,) = Lorenz96(dimension=5, forcing=8.0).derivative(0.0, (torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]]),))
    assert out.tolist() == [[-3.0, 4.0, 11.0, 13.0, -5.0]]
    (rest,) = Lorenz96().derivative(0.0, (torch.full((2, 40), 8.0),))  # x_i = F is a fixed point
    assert rest.abs().max() == 0
    with pytest.raises(ValueError, match="dimension: expected an integer >= 4"):
        Lorenz96(dimension=3)


def test_lorenz96_without_forcing_loses_energy_at_rate_two():
    """F = 0: the advection conserves E = Σ x_i²/2, so E' = −Σ x_i² = −2E and E(t) = E(0) e^{−2t}."""
    rng = np.random.default_rng(4)
    states = initial(rng, TINY, 8, scale=2.0)
    data = one_step_dataset(Lorenz96(dimension=8, forcing=0.0), states, t_end=1.0, samples=11)
    x, y = data["test"]
    energy = 0.5 * torch.cat([x, y[:, -1:]], 1).double().pow(2).sum(-1)
    expected = 0.5 * (states["test"] ** 2).sum(-1)[:, None] * np.exp(-2 * np.linspace(0, 1, 11))
    assert np.abs(energy.numpy() / expected - 1).max() < 1e-6


def test_lorenz63_data_stay_in_the_absorbing_sphere_and_follow_the_flow():
    """After the burn-in every state lies in x² + y² + (z − σ − ρ)² ≤ β²(σ + ρ)²/(4(β − 1)) (β ≥ 2, σ ≥ 1), and
    each target is its input carried over Δ = 0.02 by a tight scipy solve (float32 storage)."""
    data = lorenz63(seed=3, sizes=TINY, samples=41, standardise=False, cache=False)
    x, y = data["test"]
    assert x.shape == (3, 40, 3) and data["meta"]["sample_dt"] == pytest.approx(0.02)
    states = torch.cat([x, y[:, -1:]], 1).double()
    beta = 8.0 / 3.0
    radius2 = beta**2 * 38.0**2 / (4 * (beta - 1))
    assert (states[..., 0] ** 2 + states[..., 1] ** 2 + (states[..., 2] - 38.0) ** 2).max() < radius2
    for k in range(0, 40, 7):
        image = solve_ivp(lorenz63_rhs, [0, 0.02], x[0, k].double().numpy(), method="DOP853", rtol=1e-12,
                          atol=1e-12).y[:, -1]
        assert np.abs(image - y[0, k].double().numpy()).max() < 2e-5


def test_lorenz63_sequences_follow_the_seeded_initial_states_through_the_burn_in():
    """Initial states uniform in [−20, 20]² × [0, 50], drawn train → valid → test from one RandomState stream, solved
    by scipy over the burn-in [0, 10) and sampled every 0.02: the two solvers' ~1e-9 local errors grow by
    ≈ e^{0.9·10} over the burn-in (measured: ≤ 2.2e-3 on these states), so 1e-2 is the bar."""
    data = lorenz63(seed=3, sizes=TINY, samples=41, standardise=False, cache=False)
    rng = np.random.RandomState(3)
    starts = [rng.uniform((-20, -20, 0), (20, 20, 50), size=(n, 3)) for _, n in TINY][2]
    x, y = data["test"]
    for k in range(3):
        ref = solve_ivp(lorenz63_rhs, [0, 10.8], starts[k], t_eval=10 + 0.02 * np.arange(41), method="DOP853",
                        rtol=1e-13, atol=1e-13).y.T
        assert np.abs(torch.cat([x[k], y[k, -1:]]).double().numpy() - ref).max() < 1e-2


def test_lorenz_seeds_splits_and_cache(cache_dir, monkeypatch):
    first = lorenz63(seed=5, sizes=TINY, samples=11)
    assert {k: tuple(v[0].shape) for k, v in first.items() if k != "meta"} == {
        "train": (4, 10, 3), "valid": (2, 10, 3), "test": (3, 10, 3)}
    starts = torch.cat([first[name][0][:, 0] for name, _ in TINY])
    assert len(torch.unique(starts, dim=0)) == 9  # no sequence in two splits
    assert not torch.equal(lorenz63(seed=6, sizes=TINY, samples=11)["train"][0], first["train"][0])
    assert torch.equal(lorenz63(seed=5, sizes=TINY, samples=11, cache=False)["test"][1], first["test"][1])
    monkeypatch.setattr(odelab.data.ode_series, "one_step_dataset", lambda *a, **k: pytest.fail("cache miss"))
    assert torch.equal(lorenz63(seed=5, sizes=TINY, samples=11)["valid"][0], first["valid"][0])
    monkeypatch.undo()
    l96 = lorenz96(seed=5, sizes=TINY, samples=6, cache=False)
    assert l96["test"][0].shape == (3, 5, 40) and len(set(l96["meta"]["scale"])) == 1  # pooled: one std


BAD_ARGUMENTS = [
    (dict(samples=1), "samples: expected an integer >= 2"),
    (dict(samples=2.5), "samples: expected an integer >= 2"),
    (dict(t_end=0.0), "t_end: expected a finite time after the transient"),
    (dict(t_end=1.0, transient=1.0), "t_end: expected a finite time after the transient"),
    (dict(transient=-1.0), "transient: expected a finite number >= 0"),
    (dict(observed=[3]), r"observed: expected distinct state indices in 0 … 2"),
    (dict(observed=[0, 0]), r"observed: expected distinct state indices"),
    (dict(observed=[]), r"observed: expected distinct state indices"),
    (dict(standardise="zscore"), "standardise: expected one of"),
    (dict(names=["a"]), "names: expected one per observed component"),
    (dict(initial_states={"train": np.zeros((2, 3)), "test": np.zeros((2, 4))}), "the same state dimension"),
    (dict(initial_states={"train": np.zeros(3)}), r"initial_states\['train'\]: expected an \(N, dim\) array"),
    (dict(initial_states={"test": np.zeros((2, 3))}, standardise="pooled"), "needs a 'train' split"),
    (dict(system=Lorenz96(dimension=5)), "Lorenz96 has a state of 5 components, got 3"),
]


@pytest.mark.parametrize("change, message", BAD_ARGUMENTS, ids=[m for _, m in BAD_ARGUMENTS])
def test_builder_refuses_bad_arguments(change, message):
    arguments = dict(system=Lorenz63(), initial_states={"train": np.ones((2, 3)), "test": np.ones((1, 3))},
                     t_end=1.0, samples=5)
    with pytest.raises(ValueError, match=message):
        one_step_dataset(**{**arguments, **change})


def test_lorenz_tasks_are_registered_with_the_fhn_protocol():
    tasks = odelab.data.tasks.TASKS
    assert tasks["lorenz63"].presets["paper"] == dict(hidden_size=16, epochs=400, lr=9.04e-3, batch_size=32)
    assert tasks["lorenz96"].presets["paper"]["hidden_size"] == 64
    assert set(tasks["lorenz63"].baselines) == set(tasks["lorenz96"].baselines) == {"persistence",
                                                                                   "linear extrapolation"}
    assert (tasks["lorenz63"].plot, tasks["lorenz63"].sample_dt) == ("phase", 0.02)
    assert (tasks["lorenz96"].plot, tasks["lorenz96"].sample_dt) == ("series", 0.05)


def test_fit_lorenz63_quick_end_to_end_reports_original_units(tmp_path, monkeypatch):
    data = lorenz63(seed=7, sizes=TINY, samples=31)
    monkeypatch.setattr(odelab.data.tasks.TASKS["lorenz63"], "load", lambda seed, **options: data)
    out = tmp_path / "run"
    assert main(["fit", "lorenz63", "--preset", "quick", "--epochs", "2", "--batch-size", "2", "--hidden", "4",
                 "--engine", "generic", "--no-progress", "--out", str(out)]) == 0  # generic: no kernel build
    result = json.loads((out / "results.json").read_text())
    assert np.isfinite(result["test_rmse"]) and set(result["baselines"]) == {"persistence", "linear extrapolation"}
    x, y = lorenz63(seed=7, sizes=TINY, samples=31, standardise=False)["test"]  # the raw states
    persistence = (x - y).double().pow(2).mean((0, 1)).sqrt()
    for name, expected in zip("xyz", persistence):
        assert result["test_rmse_by_component"][name]["persistence"] == pytest.approx(float(expected), rel=1e-5)
    assert np.isfinite(result["test_rmse_original_units"])
    assert result["data"]["components"] == ["x", "y", "z"] and result["data"]["standardise"] == "component"
    assert (out / "predictions.png").stat().st_size > 0
