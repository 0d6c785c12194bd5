"""Oversmoothing study on the 4-neighbour 10×10 grid (thesis Figs. 7.2 / 8.2): GCN's Dirichlet energy decays
exponentially, GraphCON with α = 0.5 does not collapse, G² does not collapse over 1000 layers; the spectrum of
the linearised GraphCON operator; the measures against hand computations."""
import json
import math

import pytest
import torch

from odelab.analysis.oversmoothing import dirichlet_energy, energy_vs_depth, graphcon_spectrum, mad, run_study


@pytest.fixture(scope="module")
def study():
    # documented setting: m = 64 features, Glorot weights × 1, fresh per layer (GCN/GAT), shared (GraphCON, G²)
    return energy_vs_depth(features=64, weight_scale=1.0, layers=100, g2_layers=1000, seeds=(0,),
                           include=("gcn", "gat", "graphcon-gcn", "graphcon-gat", "g2-gcn"))


def test_dirichlet_energy_by_hand():
    # path 0-1-2 (both directions): D = (1/3) * 2 * (|x0 - x1|^2 + |x1 - x2|^2)
    e = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.tensor([[0.0, 1.0], [2.0, 1.0], [2.0, 4.0]])
    assert dirichlet_energy(x, e) == pytest.approx(2 * (4.0 + 9.0) / 3)
    assert dirichlet_energy(torch.ones(3, 2), e) == 0.0


def test_mad_by_hand():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    # cosine distances: d01 = d12 = 1, d02 = 0 -> node means over non-zero entries: 1, 1, 1
    assert mad(x) == pytest.approx(1.0)
    assert mad(torch.ones(4, 3)) == 0.0


def test_gcn_energy_decays_exponentially(study):
    e = study["curves"]["gcn"]["energy"]
    assert e[100] < 1e-20 * e[0]
    # log-linear: the energy falls by at least a factor e^{0.3} per layer on average over layers 1..50,
    # and keeps falling in the second half (not a one-off drop)
    assert study["summary"]["gcn"]["log_slope_1_to_50"] < -0.3
    assert e[100] < 1e-6 * e[50]


def test_gat_energy_decays(study):
    e = study["curves"]["gat"]["energy"]
    assert e[100] < 1e-5 * e[0] and e[100] < e[50] < e[10]


def test_graphcon_alpha_half_does_not_collapse(study):
    for label in ("graphcon-gcn(α=0.5)", "graphcon-gat(α=0.5)"):
        e = study["curves"][label]["energy"]
        assert all(math.isfinite(v) for v in e)
        assert e[100] > 1e-3 and e[100] > 0.1 * e[50], label  # stabilised, not collapsing
    gcn = study["curves"]["gcn"]["energy"]
    assert study["curves"]["graphcon-gcn(α=0.5)"]["energy"][100] > 1e15 * gcn[100]


def test_graphcon_alpha_zero_does_not_decay(study):
    e = study["curves"]["graphcon-gcn(α=0)"]["energy"]
    assert e[100] > e[0]  # energy-conserving linear part; the nonlinearity makes it grow


def test_g2_does_not_collapse_over_1000_layers(study):
    e = study["curves"]["g2-gcn"]["energy"]
    assert len(e) == 1001
    assert min(e) > 0.1 * e[0]
    assert study["curves"]["g2-gcn"]["mad"][1000] > 0.05
    assert study["curves"]["gcn"]["mad"][100] < 1e-3 or study["curves"]["gcn"]["energy"][100] < 1e-20


def test_spectrum_alpha_zero_conserves_alpha_positive_damps():
    result = graphcon_spectrum(alphas=(0.0, 0.5), gamma=1.0, normalisation="sym")
    zero, half = result["alphas"]["0"], result["alphas"]["0.5"]
    assert zero["conserving"] and abs(zero["max_real"]) < 1e-6
    assert all(abs(re) < 1e-6 for re, _ in zero["eigenvalues"])
    assert half["max_real"] < -1e-3 and not half["conserving"]
    # independent check of the damped modes: for an eigenvalue λ_A of Â, μ² + αμ + (γ − λ_A) = 0
    lam_a = torch.linalg.eigvalsh(torch.tensor(result["adjacency_eigenvalues"]).diag())
    roots = [(-0.5 + complex(0.25 - 4 * (1 - float(l))) ** 0.5) / 2 for l in lam_a if abs(1 - float(l)) > 1e-9]
    worst = max(r.real for r in roots)
    assert half["max_real"] == pytest.approx(worst, abs=1e-6)


def test_run_study_writes_json_and_png(tmp_path):
    out = run_study("graphcon-spectrum", str(tmp_path), rows=4, cols=4, alphas=(0.0, 0.5))
    data = json.loads((tmp_path / "graphcon-spectrum.json").read_text())
    assert set(data["alphas"]) == {"0", "0.5"}
    assert (tmp_path / "graphcon-spectrum.png").stat().st_size > 1000
    assert out["files"]["png"].endswith(".png")
    small = run_study("oversmoothing", str(tmp_path), rows=4, cols=4, features=4, layers=5, g2_layers=5)
    assert json.loads((tmp_path / "oversmoothing.json").read_text())["settings"]["features"] == 4
    assert set(small["curves"]) >= {"gcn", "gat", "graphcon-gcn(α=0)", "graphcon-gcn(α=0.5)", "g2-gcn"}
    with pytest.raises(ValueError, match="name"):
        run_study("nope", str(tmp_path))
