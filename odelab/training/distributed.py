"""Data-parallel training across processes (``torch.distributed``, launched by ``torchrun``)."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the current torch.distributed group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def sum_gradients(parameters: list[nn.Parameter]) -> None:
    """All-reduce (sum) the gradients of every rank in one flat buffer. A parameter without a gradient on a
    rank counts as zero there, and keeps ``grad = None`` when no rank has one (as in one process, where the
    optimizer then skips it)."""
    present = torch.tensor([float(p.grad is not None) for p in parameters], device=parameters[0].device)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
    flat = torch.cat([g.reshape(-1) for g in grads] + [present])
    dist.all_reduce(flat)
    offset = 0
    for p, used in zip(parameters, flat[-len(parameters):].tolist()):
        p.grad = flat[offset:offset + p.numel()].view_as(p).clone() if used else None
        offset += p.numel()


def init_distributed(device: str) -> str:
    """Join the process group torchrun describes (WORLD_SIZE > 1): nccl on CUDA, gloo on CPU. Returns the
    device of this rank (cuda:LOCAL_RANK for CUDA)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return device
    cuda = device.startswith("cuda")
    if cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    return device
