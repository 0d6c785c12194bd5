"""Results that hold one tensor per state block (``ys``, named by ``blocks``): a solution, an event."""
from __future__ import annotations

from torch import Tensor


class ByBlock:
    """``result["z"]``: the block named z; ``result.y``: the only block of a one-block system."""

    ys: tuple[Tensor, ...]
    blocks: tuple[str, ...]

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self.ys[self.blocks.index(name)]
        except ValueError:
            raise KeyError(f"no block {name!r}; blocks are {list(self.blocks)}") from None

    @property
    def y(self) -> Tensor:
        if len(self.ys) != 1:
            raise AttributeError(f"{type(self).__name__.lower()} has blocks {list(self.blocks)}; index it by name")
        return self.ys[0]
