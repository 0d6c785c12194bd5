"""The C++ source of every CPU kernel: ONE translation unit, compiled once per machine on first use.

The source lives in ``csrc/``, one file a concept (the products, the batch rows over threads, the weight gradients
step by step, the input encoding, the gates, then a file a cell family, the exports last), concatenated in
:data:`PARTS` order with ``#line`` marks, so that the compiler names the part and its line.

Plain C++17 on raw pointers (no torch headers, no pybind11: it compiles in a few seconds and is called through
``ctypes``). Matrix products go to the BLAS inside ``libtorch_cpu`` (MKL's ``sgemm_`` / ``dgemm_``, declared
weak: a torch without them falls back to the plain loops below; small products run as plain loops), except in
float32 on a CPU with AVX-512, where every product runs as the register blocks written here (MKL runs its AVX2 code
on AMD CPUs).
The float32 gate nonlinearities are branch-free so that GCC vectorises the fused gate loops; float64 uses libm.

Every cell has a forward that runs the whole time loop, storing the states and, where the cell has matrix
products, writing the pre-activations into the buffer that held the input encoding (``V u + b``, computed for
all steps in one GEMM by torch): the memory the backward keeps is the states plus that buffer, as for a
backward that would recompute the products, and the backward needs no product recomputed. The backward (BPTT)
recomputes the gates elementwise from the stored pre-activations and states and writes the per-step
pre-activation gradients; weight gradients are then products over the steps read from the stored states in
place: step by step inside the backward, while a step's gradients are still in cache (``weights.cpp``), except
under the delay cells' state dropout, which scales the states the steps read: then one product per sample afterwards
(``state_products``, no shifted copy of the sequence); for diagonal and per-synapse parameters,
accumulated here in double. Without a backward to come, the Python side runs a forward over chunks
of steps, so the whole sequence's encoding is never allocated.

Layout: batch first, as odelab's sequences, ``(B, T, k)`` contiguous; one step is a ``(B, k)`` matrix with
row stride ``T k``. Each kernel is a template on the scalar type, exported as ``NAME(f64, sizes, pointers,
scalars)`` (see :func:`odelab.kernels.cpu.extension.call`).
"""

from importlib import resources

PARTS = ("prelude", "products", "threads", "weights", "affine", "gates", "lem", "cornn", "unicornn", "gru_ode", "oscillator",
         "delay", "liquid", "exports")


def _part(name: str) -> str:
    return resources.files(__package__).joinpath("csrc", f"{name}.cpp").read_text(encoding="utf-8")


SOURCE = "".join(f'#line 1 "odelab/kernels/cpu/csrc/{name}.cpp"\n{_part(name)}' for name in PARTS)
