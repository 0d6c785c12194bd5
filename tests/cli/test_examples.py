"""Every example runs with --tiny (a smoke run of seconds) and exits cleanly."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fresh_cache

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ODELAB_CACHE=fresh_cache(cwd / "cache"))  # data sets go to the test's folder, not ~/.cache
    return subprocess.run([sys.executable, str(EXAMPLES / name), "--tiny", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.mark.parametrize("name,args,outputs", [
    ("compare_schemes.py", ("--out", "out"), ("compare_schemes.json", "compare_schemes.png")),
    ("stability.py", ("--out", "out"), ("gradients.png", "lem_bound.json", "unicornn.png", "eigen.png",
                                        "lrc_damping.json")),
    ("custom_system.py", (), ()),
    ("fitzhugh_nagumo.py", ("--out", "out"), ("lem.png", "lstm.png")),
    ("enso.py", ("--out", "out"), ("enso_trajectories.png", "enso_continued.png")),
    ("mackey_glass.py", (), ()),
    ("irregular_sampling.py", ("--out", "out"), ("irregular.png",)),
    ("char_language_model.py", ("--out", "out"), ("bpc.png",)),
    ("forecast_csv.py", ("--out", "out"), ("forecast_lem.png", "forecast_lstm.png", "lem/results.json")),
    ("bouncing_ball.py", ("--out", "out"), ("bouncing_ball.png", "results.json")),
    ("stiff_kinetics.py", ("--out", "out"), ("stiff_kinetics.png", "results.json")),
    ("diode_circuit.py", ("--out", "out"), ("diode_circuit.png", "results.json")),
    ("state_delay.py", ("--out", "out"), ("state_delay.png", "results.json")),
    ("gene_oscillator.py", ("--out", "out"), ("gene_oscillator.png", "results.json")),
])
def test_example_runs_tiny(tmp_path, name, args, outputs):
    result = run_example(name, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip()
    for output in outputs:
        assert (tmp_path / "out" / output).stat().st_size > 0
