"""The multiscale steps of gated cells (``odelab.analysis.gates``, ``odelab gates``): Rusch et al. 2022, App. B.2,
Figs. 4, 5, 7. References: eq. 3's steps written out here; densities of distributions with closed forms."""
import json
import math

import pytest
import torch

import odelab
from odelab.analysis.gates import effective_steps, log_histogram, step_summary, tail_fit
from odelab.cli import main

from helpers import random_task_data


def test_lem_steps_are_eq3s_multiscale_steps():
    """{"z": Δt σ̂(W1 y_{n−1} + V1 u_n + b1), "y": Δt σ̂(W2 y_{n−1} + V2 u_n + b2)} at every step and unit."""
    torch.manual_seed(0)
    cell = odelab.cells.LEM(3, 5, dt=0.7).double()
    x = torch.randn(4, 9, 3, dtype=torch.float64)
    steps = effective_steps(cell, x)
    S = {k: v.detach() for k, v in cell.system.symbols().items()}
    z = y = torch.zeros(4, 5, dtype=torch.float64)
    dz, dy = [], []
    for u in x.unbind(1):
        a = 0.7 * torch.sigmoid(y @ S["W1"].T + u @ S["V1"].T + S["b1"])
        b = 0.7 * torch.sigmoid(y @ S["W2"].T + u @ S["V2"].T + S["b2"])
        z = (1 - a) * z + a * torch.tanh(y @ S["Wz"].T + u @ S["Vz"].T + S["bz"])
        y = (1 - b) * y + b * torch.tanh(z @ S["Wy"].T + u @ S["Vy"].T + S["by"])
        dz.append(a)
        dy.append(b)
    assert list(steps) == ["z", "y"]
    assert (steps["z"] - torch.stack(dz, 1)).abs().max() < 1e-14
    assert (steps["y"] - torch.stack(dy, 1)).abs().max() < 1e-14
    assert cell.engine == "auto" and cell.scheme.name == "imex"  # restored after the study


def test_single_scale_steps_are_dt_and_unfolded_cells_record_every_substep():
    cell = odelab.models.cells.PRESETS["lem-single"](2, 3, dt=0.25)
    steps = effective_steps(cell, torch.randn(2, 7, 2))
    assert all(torch.equal(v, torch.full((2, 7, 3), 0.25)) for v in steps.values())
    ltc = odelab.cells.LTC(2, 3, unfolds=6)
    assert effective_steps(ltc, torch.randn(2, 5, 2))["h"].shape == (2, 30, 3)


def test_cells_without_a_decay_split_are_refused():
    with pytest.raises(ValueError, match="no decay to read"):
        effective_steps(odelab.cells.GRUODE(2, 3), torch.randn(1, 4, 2))  # explicit Euler on the whole field
    with pytest.raises(ValueError, match="no decay to read"):
        effective_steps(odelab.cells.NeuralOscillator(2, 3), torch.randn(1, 4, 2))  # symplectic
    with pytest.raises(TypeError, match="Recurrent"):
        effective_steps(torch.nn.GRU(2, 3), torch.randn(1, 4, 2))


def test_log_histogram_is_a_density():
    """Log-uniform values on [1e-3, 1]: density 1/(s ln 1000), and it integrates to 1."""
    g = torch.Generator().manual_seed(1)
    s = 10 ** (-3 * torch.rand(400_000, generator=g, dtype=torch.float64))
    edges, density = log_histogram(s, bins=30)
    assert float((density * edges.diff()).sum()) == pytest.approx(1.0, abs=1e-12)
    centres = (edges[:-1] * edges[1:]).sqrt()
    expected = 1 / (centres * math.log(1000))
    assert ((density / expected - 1).abs()[1:-1].max()) < 0.05
    with pytest.raises(ValueError, match="positive"):
        log_histogram(torch.zeros(3))


def test_tail_fit_tells_a_power_law_from_an_exponential():
    """Pareto(α = 1.5) has density ∝ s^−2.5; Exp(λ = 4) has density ∝ e^−4s."""
    g = torch.Generator().manual_seed(2)
    u = torch.rand(200_000, generator=g, dtype=torch.float64)
    pareto = u ** (-1 / 1.5)  # on [1, ∞)
    fit = tail_fit(pareto)
    assert fit["better"] == "power law" and fit["power_law"]["exponent"] == pytest.approx(2.5, rel=0.1)
    exponential = -torch.log(u) / 4
    fit = tail_fit(exponential)
    assert fit["better"] == "exponential" and fit["exponential"]["rate"] == pytest.approx(4.0, rel=0.1)
    assert tail_fit(torch.tensor([1.0, 2.0])) is None
    summary = step_summary({"z": pareto})["z"]
    assert summary["quantiles"]["0.5"] == pytest.approx(2 ** (1 / 1.5), rel=0.02)  # median of Pareto: 2^(1/α)
    assert summary["decades_1_99"] == pytest.approx(math.log10((0.01 ** (-1 / 1.5)) / (0.99 ** (-1 / 1.5))), rel=0.02)


@pytest.fixture
def tiny_fhn(monkeypatch, tmp_path):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path / "cache"))
    return random_task_data(monkeypatch, "fhn", 15, (8, 4, 6), 3)


def test_cli_gates_reads_a_fit_run(tiny_fhn, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["fit", "fhn", "--model", "lem", "--model-option", "dt=2", "--hidden", "4", "--epochs", "1",
                 "--no-progress", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["gates", "--run", str(run), "--sequences", "5", "--marks", "0.4,0.008"]) == 0
    printed = capsys.readouterr().out
    result = json.loads((run / "gates.json").read_text())
    assert result["sequences"] == 5 and result["steps"] == 15 and result["marks"] == [0.4, 0.008]
    assert set(result["blocks"]) == {"z", "y"} and result["blocks"]["z"]["values"] == 5 * 15 * 4
    assert 0 < result["blocks"]["z"]["min"] <= result["blocks"]["z"]["max"] <= 2.0  # Δt σ̂ with Δt = 2
    assert (run / "gates.png").stat().st_size > 0 and "decades" in printed


def test_cli_gates_errors(tiny_fhn, tmp_path, capsys):
    run = tmp_path / "gru"
    assert main(["fit", "fhn", "--model", "gru", "--hidden", "3", "--epochs", "1", "--no-progress",
                 "--out", str(run)]) == 0
    with pytest.raises(SystemExit, match="no odelab Recurrent"):
        main(["gates", "--run", str(run)])
    with pytest.raises(SystemExit, match="results.json is missing"):
        main(["gates", "--run", str(tmp_path / "nowhere")])
    with pytest.raises(SystemExit, match="--marks"):
        main(["gates", "--run", str(run), "--marks", "0,1"])


def test_steps_of_an_irregularly_sampled_sequence_are_gap_times_gate():
    torch.manual_seed(4)
    cell = odelab.cells.LEM(2, 3).double()
    x = torch.randn(2, 6, 2, dtype=torch.float64)
    gaps = 0.1 + torch.rand(2, 6, dtype=torch.float64)
    unit = effective_steps(cell, x, dt=torch.ones_like(gaps))
    # the gates read y_{n−1}, which the gaps change: compare the first step, where y_0 = 0 for both
    scaled = effective_steps(cell, x, dt=gaps)
    assert torch.allclose(scaled["z"][:, 0], gaps[:, :1] * unit["z"][:, 0], atol=1e-15)
    assert scaled["z"].shape == (2, 6, 3)
