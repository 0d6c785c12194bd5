"""CUDA kernels (Triton): registrations (module paths only; the kernel modules import Triton themselves, on
first use, so a CPU-only install never needs it)."""
