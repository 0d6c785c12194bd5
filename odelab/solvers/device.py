"""The current CUDA device for work on a tensor: Triton launches a kernel, and ``torch.cuda.graph`` captures, on the
*current* device, whatever device the tensors are on (torch's own operators switch to their tensors' device). A
model on ``cuda:1`` while ``cuda:0`` is current would have its kernels launched on device 0 with device 1's memory.
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves


def on_device_of(value):
    """A context in which the CUDA device of ``value`` (a tensor, or the first tensor of a tuple, list or dict of
    them) is the current one; for other devices, or no tensor, one that does nothing."""
    tensor = value if isinstance(value, Tensor) else next(
        (leaf for leaf in tree_leaves(value) if isinstance(leaf, Tensor)), None)
    if tensor is not None and tensor.device.type == "cuda":
        return torch.cuda.device(tensor.device)
    return contextlib.nullcontext()
