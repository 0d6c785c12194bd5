"""Shared pytest configuration for odelab.

Tests marked ``gpu`` are skipped automatically when no CUDA device is available.
The ``slow`` and ``gpu`` markers are registered in pyproject.toml.
"""

import pytest


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
    """The tests use small tensors: one intra-op thread avoids oversubscribing the cores (tests that spawn
    processes run beside each other), and keeps timings stable on a shared 2-core machine."""
    import torch

    torch.set_num_threads(1)
