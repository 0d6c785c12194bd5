"""The fused kernels and ``torch.autocast``: a kernel takes one floating dtype throughout, the parameters'.

Autocast lowers the input encoding (a linear map) to bfloat16 or float16, which a kernel would then get beside
float32 weights and states. So :func:`outside_autocast` runs a kernel's forward with autocast off for its device
(``Recurrent.forward`` and ``UnICORNNStack`` wrap each kernel call in it), and :func:`backward_outside_autocast`
does the same for the backward of a kernel's autograd Function, which may run inside an autocast region (torch
advises against it, but it is legal): the kernel's products stay in the parameters' dtype there too. Only the
encoding's own backward, an ordinary torch product, follows autocast then. Both cost one flag read where autocast
is off (``torch.amp.custom_fwd``/``custom_bwd`` would enter a context on every call).
"""
from __future__ import annotations

import contextlib
import functools

import torch
from torch import Tensor


def outside_autocast(x: Tensor):
    """A context with ``torch.autocast`` off for x's device where it is on (else one that does nothing)."""
    if x.device.type in ("cpu", "cuda") and torch.is_autocast_enabled(x.device.type):
        return torch.autocast(x.device.type, enabled=False)
    return contextlib.nullcontext()


def backward_outside_autocast(device_type: str):
    """Decorates an autograd Function's ``backward(ctx, *grads)``: it runs with ``torch.autocast`` off for
    ``device_type``, as the kernel's forward ran (:func:`outside_autocast`)."""

    def decorate(backward):
        @functools.wraps(backward)
        def run(ctx, *grads):
            if torch.is_autocast_enabled(device_type):
                with torch.autocast(device_type, enabled=False):
                    return backward(ctx, *grads)
            return backward(ctx, *grads)

        return run

    return decorate
