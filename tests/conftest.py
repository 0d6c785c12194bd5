"""Shared pytest configuration for odelab.

Tests marked ``gpu`` are skipped automatically when no CUDA device is available.
The ``slow`` and ``gpu`` markers are registered in pyproject.toml.
"""

import os

import pytest

try:  # property-based tests: a short profile for CI, a long one for `make test-long`
    from hypothesis import HealthCheck, settings

    settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("long", max_examples=1000, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # hypothesis comes with the test extra; without it those tests are skipped
    pass


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip_gpu)


def pytest_configure(config):
    """The tests use small tensors: one intra-op thread per test process avoids oversubscribing the cores
    (`make test` runs one pytest-xdist worker per core; tests that spawn processes run beside them)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def float64():
    """Run a test with float64 as torch's default dtype (numerical-accuracy tests)."""
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)
