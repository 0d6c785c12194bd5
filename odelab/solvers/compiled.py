"""What ``compile=True`` wraps around torch.compile: a symbolic batch size with static state sizes, and a code
object of its own per compiled configuration."""
from __future__ import annotations

import contextlib
import types
from typing import Callable, Iterable

import torch
from torch import Tensor


class BatchDynamic:
    """A torch.compile'd step (``dynamic=None``) whose batch-sized dimensions are symbolic and whose state sizes are
    static (callers key their compiled steps by them): one compilation serves every batch size, and the kernels
    index a state of known width. Fully dynamic shapes cost the method-of-lines benchmark (64 × 1024 cells,
    torch.roll in the field) 2.7× its static-shape time, slower than eager, and a 256-wide delay system 1.5×.
    ``batch_dims(args)`` lists the (tensor, dimension) pairs to mark on the first call; a size seen there as 0
    or 1, or fixed by the system itself (a per-sample parameter), stays static until dynamo's automatic dynamic
    shapes see it change (one recompilation)."""

    def __init__(self, step: Callable, batch_dims: Callable[[tuple], Iterable[tuple[Tensor, int]]]):
        self.step, self.batch_dims, self.marked = step, batch_dims, False

    def __call__(self, *args, **kwargs):
        if not self.marked:
            for x, dim in self.batch_dims(args):
                if x.shape[dim] > 1:
                    torch._dynamo.maybe_mark_dynamic(x, dim)
            self.marked = True
        return self.step(*args, **kwargs)


def own_code(function: Callable, name: str) -> Callable:
    """``function`` with a code object of its own, named ``name``. Dynamo keeps compiled graphs and the
    recompilation limit (8) per code object, and the sizes behind automatic dynamic shapes per (file, line,
    name), also across processes: give each tableau and state width its own name, so that compiling a
    1024-wide system after a 2-wide one does not make the state width symbolic, nor do eight compiled systems
    send the ninth to eager."""
    return types.FunctionType(function.__code__.replace(co_name=name), function.__globals__, name,
                              function.__defaults__, function.__closure__)


@contextlib.contextmanager
def tracing_options(scalar_outputs: bool = False):
    """Trace with every size its own symbol (by default dynamo ties sizes that happen to be equal, a batch of 4
    and a 4-row interpolant matrix, and the next batch size recompiles) and with Python numbers (the tableau's
    coefficients and stage indices, the controller's constants) as constants, not as inputs converted to tensors
    on every call: once a recompilation turns dynamic, each int read from the solver would become a symbol with
    a guard (dopri5: 20 stage indices, ~0.1 s of the step's 1.4 s tracing). Entered once per segment: entering
    it costs more than a compiled step's call. ``scalar_outputs``: allow reading a tensor's value as a number while
    tracing, which inductor's lowering of a scan (the loop index) needs."""
    from torch.fx.experimental import _config

    options = dict(specialize_float=True, specialize_int=True)
    if scalar_outputs:
        options["capture_scalar_outputs"] = True
    with _config.patch(use_duck_shape=False), torch._dynamo.config.patch(**options):
        yield
