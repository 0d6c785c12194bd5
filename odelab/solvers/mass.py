"""Mass matrices: M y' = f(t, y) with a constant M, for the linearly implicit methods (``rosenbrock.py``).

A singular M makes a differential-algebraic system: with M = U Σ Vᵀ (an SVD) and U_n, V_n the singular vectors of
its zero singular values, the rows U_nᵀ f(t, y) = 0 are algebraic equations and y's components along V_n are the
algebraic unknowns (changing them leaves M y' alone). Index 1 means U_nᵀ J V_n is nonsingular (J = ∂f/∂y): the
equations fix the algebraic unknowns given the rest. A start must satisfy them: :func:`check_consistent` checks,
:func:`consistent_start` solves for the algebraic unknowns by Newton's method, keeping y0's components along M's row
space (V_d), the case of Brown, Hindmarsh & Petzold (1998) where the differential variables are given.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

_NEWTON_ITERATIONS = 25


def mass_matrix(mass, y0: Tensor, singular: bool, name: str) -> Tensor:
    """``mass`` as a (1 or batch, dim, dim) tensor of y0's dtype and device: M of the flat state (the blocks
    concatenated in order), given as (dim, dim), (batch, dim, dim) or the diagonal (dim,). ``singular``: whether the
    method solves DAEs (else a singular M is refused)."""
    batch, dim = y0.shape
    if not isinstance(mass, Tensor):
        try:
            mass = torch.as_tensor(mass)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(f"mass: expected a tensor (dim, dim), (batch, dim, dim) or its diagonal (dim,), got "
                            f"{type(mass).__name__}") from error
    if mass.is_complex() or not (mass.is_floating_point() or mass.dtype in (torch.int32, torch.int64, torch.bool)):
        raise TypeError(f"mass: expected real numbers, got {mass.dtype}")
    mass = mass.to(dtype=y0.dtype, device=y0.device)
    if mass.dim() == 1 and mass.shape[0] == dim:
        mass = torch.diag_embed(mass)
    if mass.dim() == 2:
        mass = mass.unsqueeze(0)
    if mass.dim() != 3 or mass.shape[1:] != (dim, dim) or mass.shape[0] not in (1, batch):
        raise ValueError(f"mass: expected ({dim}, {dim}), ({batch}, {dim}, {dim}) or the diagonal ({dim},) for the "
                         f"flat state of {dim} (the blocks concatenated), got {tuple(mass.shape)}")
    if not bool(torch.isfinite(mass).all()):
        raise ValueError("mass: contains NaN or Inf")
    if not singular and null_spaces(mass)[0].shape[-1]:
        raise ValueError(f"mass: singular; {name} takes a nonsingular M (as MATLAB's ode23s); a DAE of index 1 "
                         f"(M singular) needs method='rodas4' (or 'rodas4p', 'rodas4p2')")
    return mass


def null_spaces(mass: Tensor) -> tuple[Tensor, Tensor]:
    """(U_n, V_n), each (1 or batch, dim, k): M's left and right singular vectors of the singular values below
    dim · eps · σ_max, from one SVD; k must be the same for every sample (ValueError otherwise)."""
    u, sigma, vh = torch.linalg.svd(mass.detach())
    null = sigma <= sigma[..., :1] * sigma.shape[-1] * torch.finfo(sigma.dtype).eps
    counts = null.sum(-1)
    if bool((counts != counts[0]).any()):
        raise ValueError(f"mass: the samples' mass matrices have null spaces of different sizes "
                         f"({sorted(set(counts.tolist()))}); one system of algebraic equations serves the batch")
    k, dim = int(counts[0]), sigma.shape[-1]  # the SVD sorts σ descending: the null ones come last
    return u[..., dim - k:], vh[..., dim - k:, :].transpose(-1, -2)


def _residual(left: Tensor, f: Tensor) -> Tensor:
    """U_nᵀ f per sample, (batch, k)."""
    return (left.transpose(-1, -2) @ f.unsqueeze(-1)).squeeze(-1)


def check_consistent(mass: Tensor, f0: Tensor, hint: str = "start on the constraint manifold, or solve with "
                     "initialize='algebraic'") -> None:
    """ValueError where y0 breaks the algebraic equations of M y' = f: U_nᵀ f(t0, y0) must vanish, to
    √eps · (1 + max |f0|) per sample."""
    left, _ = null_spaces(mass)
    if not left.shape[-1]:
        return
    residual = _residual(left, f0).abs().amax(1)
    bound = math.sqrt(torch.finfo(f0.dtype).eps) * (1 + f0.abs().amax(1))
    bad = ~(residual <= bound)
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        raise ValueError(f"y0: inconsistent with the algebraic equations of M y' = f (the components of f along M's "
                         f"null space): residual {float(residual[b]):.3g} > {float(bound[b]):.3g} at sample {b} "
                         f"({int(bad.sum())} of {bad.shape[0]} samples); {hint}")


def consistent_start(mass: Tensor, y0: Tensor, field: Callable[[Tensor], Tensor],
                     linearise: Callable[[Tensor], tuple[Tensor, Tensor]]) -> Tensor:
    """y0 moved along V_n until U_nᵀ f(t0, y) = 0: Newton's method on the algebraic unknowns, y ← y − V_n A⁻¹ U_nᵀ f
    with A = U_nᵀ J V_n, then one step recorded by autograd, whose gradient is the implicit function theorem's
    (dy/dp = −V_n A⁻¹ U_nᵀ ∂f/∂p; y0's own components along V_n pass none). ``field(y)``: f(t0, y);
    ``linearise(y)``: (f(t0, y), J) without a graph. Unchanged where M is nonsingular."""
    left, right = null_spaces(mass)
    if not right.shape[-1]:
        return y0
    y, tiny = y0.detach(), 16 * torch.finfo(y0.dtype).eps
    for _ in range(_NEWTON_ITERATIONS):
        f, jac = linearise(y)
        system = left.transpose(-1, -2) @ jac @ right
        delta, _ = torch.linalg.solve_ex(system, _residual(left, f))
        y = y - (right @ delta.unsqueeze(-1)).squeeze(-1)
        if not bool(torch.isfinite(delta).all()) or bool((delta.abs().amax(1) <= tiny * (1 + y.abs().amax(1))).all()):
            break
    if not (torch.is_grad_enabled() and (y0.requires_grad or field(y).requires_grad)):
        return y
    _, jac = linearise(y)
    system = left.transpose(-1, -2) @ jac @ right
    moved = y0 + (y - y0.detach())  # the converged point, with y0's graph
    return moved - (right @ torch.linalg.solve(system, _residual(left, field(moved))).unsqueeze(-1)).squeeze(-1)
