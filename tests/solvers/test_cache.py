import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from odelab.solvers.cache import cache_root, keep_compiled_code


def test_cache_root_follows_odelab_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv("ODELAB_CACHE")
    assert cache_root() == Path.home() / ".cache" / "odelab"


def test_compiled_code_goes_under_odelab_cache_unless_set(monkeypatch, tmp_path):
    """compile=True's inductor cache lands in $ODELAB_CACHE/inductor; a TORCHINDUCTOR_CACHE_DIR already set (by the
    user, or by a compilation earlier in the process) is left alone."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("ODELAB_CACHE", str(tmp_path))
    keep_compiled_code()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "elsewhere"))
    keep_compiled_code()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "elsewhere")


# one compile=True solve in a fresh process: AOTAutograd cache hits and restarts of dynamo's analysis of the step
# (torch._dynamo is imported after the solve: importing it fixes inductor's cache directory before odelab sets it)
_SOLVE_COMPILED = """
import json, torch, odelab
from odelab.systems import VanDerPol
y0 = torch.tensor([[2.0, 0.0], [1.0, 1.0], [0.0, 0.3]], dtype=torch.float64)
odelab.solve(VanDerPol(mu=2.0), y0, torch.linspace(0, 5, 11, dtype=torch.float64), compile=True)
from torch._dynamo.utils import counters, get_compilation_metrics
restarts = [m.restart_reasons for m in get_compilation_metrics() if m.co_name == "attempt" and m.restart_reasons]
print(json.dumps(dict(hits=counters["aot_autograd"]["autograd_cache_hit"], restarts=len(restarts))))
"""


@pytest.mark.slow
def test_a_later_process_loads_the_compiled_step(tmp_path):
    """compile=True keeps the compiled step under $ODELAB_CACHE/inductor and a second process loads it from there
    (an AOTAutograd cache hit: nothing in the step's cache key changes between processes); neither traces the
    step twice (0-d float64 arguments made dynamo restart its analysis in the compiling process)."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"} | {"ODELAB_CACHE": str(tmp_path)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _SOLVE_COMPILED], env=env, capture_output=True,
                                      text=True, check=True).stdout.splitlines()[-1]) for _ in range(2)]
    assert (tmp_path / "inductor").is_dir()
    assert [run["hits"] for run in runs] == [0, 1]
    assert [run["restarts"] for run in runs] == [0, 0]
