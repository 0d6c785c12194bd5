"""CUDA kernels (Triton): registrations (module paths only; the kernel modules import Triton themselves, on
first use, so a CPU-only install never needs it).

Every kernel runs the whole sequence in one launch forward and one backward (see ``_common`` for the layout);
fp32 (IEEE products, TF32 where torch's float32 matmuls may use it, three TF32 products with
``ODELAB_FLOAT32_PRODUCTS=tf32x3``, or bfloat16-rounded operands with ``=bf16``: ``_common.dot_precision``) and fp64. LEM,
coRNN, the neural oscillator, GRU-ODE, τ-GRU and Delay GRU also have a stepwise schedule for large hidden sizes
(``stepwise``: a launch per phase of a step over batch blocks × column tiles, recorded as CUDA graphs; the default
on CUDA from hidden 33, ``ODELAB_CUDA_SCHEDULE=persistent`` keeps the one-launch kernels); the same kernels also have a
grid-synchronised one (``grid``: those phases in one launch, a barrier between them; ``ODELAB_CUDA_SCHEDULE=grid``).
Without a backward to come, the cells run in chunks of steps (``..chunks.in_chunks``; the delay cells' own in
``delay_gru``). ``gaps=True``: the kernel also takes per-sample steps (``Recurrent.forward(x, dt=gaps)``), in every
schedule, with a constexpr GAPS whose False variant compiles to the code of a kernel without it. ``dropout=True``
(τ-GRU, Delay GRU): the kernel also takes state dropout's factors (``drop=``) in every schedule, likewise a constexpr
DROP whose False variant compiles to the code without it. ``gap_grads=True`` (every cell with ``gaps=True``): with
gaps that require grad (a learned Δt) every schedule's backward also gives their gradient (a constexpr DHS, likewise;
the stepwise and grid schedules write each column tile's part of a row's sum, ``_common.store_length_part``).
"""
from ... import systems
from ..registry import register

register(systems.LEM, "imex", "cuda", ".cuda.lem:run", gaps=True, gap_grads=True)
register(systems.CoRNN, "imex", "cuda", ".cuda.oscillators:run_cornn_explicit", gaps=True, gap_grads=True)
register(systems.CoRNN, "imex-implicit", "cuda", ".cuda.oscillators:run_cornn_implicit", gaps=True,
         gap_grads=True)
register(systems.NeuralOscillator, "symplectic-euler", "cuda", ".cuda.oscillators:run_oscillator", gaps=True,
         gap_grads=True)
register(systems.UnICORNN, "symplectic-euler", "cuda", ".cuda.unicornn:run")
register(systems.UnICORNN, "symplectic-euler", "cuda", ".cuda.unicornn:run_reversible", reversible=True)
register(systems.GRU, "euler", "cuda", ".cuda.gru:run", gaps=True, gap_grads=True)
register(systems.TauGRU, "euler", "cuda", ".cuda.delay_gru:run_taugru", dropout=True)
register(systems.DelayGRU, "euler", "cuda", ".cuda.delay_gru:run_delaygru", dropout=True)
register(systems.LTC, "imex-implicit", "cuda", ".cuda.liquid:run_ltc", gaps=True, gap_grads=True)
register(systems.STC, "imex-implicit", "cuda", ".cuda.liquid:run_stc", gaps=True, gap_grads=True)
register(systems.LRC, "euler", "cuda", ".cuda.liquid:run_lrc", gaps=True, gap_grads=True)
