import os
from pathlib import Path

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
