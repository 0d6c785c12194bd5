"""Peak memory of one fused CUDA training step, modelled without a GPU.

    python benchmarks/cuda_memory_model.py [--models lem,taugru] [--sizes 1024x1000x256] [--forward]
                                           [--out results.json]

The CUDA cells' Python side (the autograd Functions of ``odelab/kernels/cuda``) runs on ``meta`` tensors, which
have shapes and no memory; the Triton launches are skipped (they only write into buffers the Functions allocate).
Every storage a training step creates is counted from its allocation to its release, and the largest sum is the
step's peak, the figure that ``cell_speed.py`` reads from ``torch.cuda.max_memory_allocated`` on a GPU. What the
model leaves out: the CUDA caching allocator's rounding of each block and cuDNN's workspace (nn.LSTM is not
modelled). The kernels take the schedule they take on a GPU: the grid-synchronised one from hidden 33 (its variant
that streams the weights; the liquid cells' from hidden 17, their synapse tiles for 132 multiprocessors), the
one-launch persistent one below.

Checked against the H200's figures of 2026-11-26 (``benchmarks/results/h200_2026-11-26_s7*``), run with the code
of that lease: 56 of the 60 fused rows that ran the model's schedule agree to 2.5 %; the GPU measured more for
GRU-ODE at (128, 1000, 128) (10 %) and for the reversible UnICORNN at (128, 1000, 128) (2.0×) and
(1024, 1000, 256) (6.5 %).

Sizes are also printed in units of one (B, T, H) tensor of the step's dtype, the size of a state sequence.
``--forward`` models a forward under ``torch.no_grad()`` instead (no backward to come: the cells run in chunks of
steps, ``odelab/kernels/chunks.py``; the delay cells' in ``odelab/kernels/cuda/delay_gru.py``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import weakref
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: Triton imports without a driver (no kernel runs)

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

MIB = 2 ** 20
MULTIPROCESSORS = 132  # an H100's or H200's: the liquid cells' grid schedule's synapse tiles depend on them


class PeakStorage(TorchDispatchMode):
    """Inside: the bytes of the storages that operators create, live at once; ``peak`` and ``at_peak`` (the live
    storages then: (bytes, operator, shape), largest first). A storage counts from the operator that creates it
    until it is released; those that existed before (parameters, the input) do not count."""

    def __init__(self, smallest: int = 0):
        super().__init__()
        self.smallest, self.live, self.current, self.peak, self.at_peak = smallest, {}, 0, 0, []

    def _released(self, key) -> None:
        self.current -= self.live.pop(key, (0,))[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {leaf.untyped_storage()._cdata for leaf in tree_leaves((args, kwargs))
                  if isinstance(leaf, torch.Tensor)}  # a view's or an in-place result's storage is not new
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage._cdata  # the storage itself: meta storages have no address
            if key in self.live or key in inputs or storage.nbytes() < self.smallest:
                continue
            self.live[key] = (storage.nbytes(), str(func), tuple(tensor.shape))
            weakref.finalize(storage, self._released, key)
            self.current += storage.nbytes()
            if self.current > self.peak:
                self.peak = self.current
                self.at_peak = sorted(self.live.values(), key=lambda entry: -entry[0])
        return out


@contextlib.contextmanager
def cuda_path_on_meta():
    """Inside, a fused cell on ``meta`` tensors runs its CUDA kernel's Python side with the schedule a GPU takes,
    and no Triton launch."""
    import triton
    import triton.runtime.interpreter

    from odelab import kernels
    from odelab.kernels import registry
    from odelab.kernels.cuda import grid, liquid
    from odelab.models import recurrent

    def find(system, scheme, x, reversible=False):
        return registry.REGISTRY.get((type(system), scheme, "cuda", reversible))

    def schedule_for(schedule, x, hidden, block_h):
        return "grid" if hidden > 32 or block_h is not None else "persistent"

    def liquid_schedule(schedule, x, hidden, block_h):
        return "grid" if hidden > liquid.RESIDENT_H or block_h is not None else "persistent"

    def synapse_tiles(hidden, schedule, device):
        return liquid.grid_tiles(hidden, MULTIPROCESSORS)

    patches = [(kernels, "find", find), (recurrent.kernels, "find", find), (registry.Implementation, "available",
               lambda self: True), (grid, "schedule_for", schedule_for), (grid, "resident", lambda *a, **k: False),
               (grid, "launch", lambda *a, **k: None), (grid, "launch_resident", lambda *a, **k: None),
               (liquid, "liquid_schedule", liquid_schedule), (liquid, "synapse_tiles", synapse_tiles),
               (liquid, "_launch_phases", lambda *a, **k: None), (liquid, "_launch_slabs", lambda *a, **k: None),
               (liquid, "row_slabs", lambda hidden, batch, schedule, device: liquid.slab_shape(hidden, batch,
                                                                                                MULTIPROCESSORS)),
               (triton.runtime.jit.JITFunction, "run", lambda self, *a, **k: None),
               (triton.runtime.interpreter.InterpretedFunction, "run", lambda self, *a, **k: None)]
    saved = [(owner, name, owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name))
             for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def modelled_peak(model: torch.nn.Module, x: torch.Tensor, smallest: int = 0) -> PeakStorage:
    """The peak of one training step of ``model`` (on ``meta``) on ``x`` (``meta``), above the parameters: the
    gradients of the mean output, as ``cell_speed.py`` times it."""
    with cuda_path_on_meta(), PeakStorage(smallest) as tracker:
        model(x)[0].mean().backward()
    return tracker


def modelled_forward_peak(model: torch.nn.Module, x: torch.Tensor, smallest: int = 0) -> PeakStorage:
    """The peak of one forward of ``model`` on ``x`` (both on ``meta``) under ``torch.no_grad()``, above the
    parameters."""
    with torch.no_grad(), cuda_path_on_meta(), PeakStorage(smallest) as tracker:
        model(x)
    return tracker


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cell_speed import MODELS, build

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="lem,cornn,cornn-implicit,unicornn,unicornn-reversible,oscillator,"
                                            "gru-ode,taugru,delaygru,lrcu-a,lrcu-s,ltc,stc")
    parser.add_argument("--sizes", default="32x1000x16,128x1000x128,1024x1000x256")
    parser.add_argument("--show", type=int, default=0, help="list this many of the largest storages at the peak")
    parser.add_argument("--forward", action="store_true", help="a forward under torch.no_grad() instead")
    parser.add_argument("--out")
    args = parser.parse_args()
    measure = modelled_forward_peak if args.forward else modelled_peak
    rows = []
    for size in args.sizes.split(","):
        batch, steps, hidden = map(int, size.split("x"))
        unit = batch * steps * hidden * 4
        for name in args.models.split(","):
            if name not in MODELS:
                raise SystemExit(f"--models: unknown {name!r}; choose from {', '.join(MODELS)}")
            torch.manual_seed(0)
            model = build(name, hidden, "meta")
            peak = measure(model, torch.empty(batch, steps, 1, device="meta"), smallest=MIB // 16)
            rows.append({"model": name, "batch": batch, "time": steps, "hidden": hidden,
                         "modelled_peak_bytes": peak.peak, "in_state_sequences": peak.peak / unit})
            print(f"{name:20s} ({batch}, {steps}, {hidden}): {peak.peak / MIB:9.1f} MiB = "
                  f"{peak.peak / unit:6.2f} × (B, T, H)")
            for nbytes, op, shape in peak.at_peak[: args.show]:
                print(f"{'':24s}{nbytes / unit:6.2f}  {op} {shape}")
    if args.out:
        what = "forward under torch.no_grad()" if args.forward else "training step"
        meta = {"what": f"modelled peak of one fused CUDA {what} (meta tensors, no launches)",
                "torch": torch.__version__, "dtype": "float32", "input_size": 1}
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
