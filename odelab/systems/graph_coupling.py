"""Plain-torch coupling functions F_θ(X, graph) for the graph systems (no PyTorch Geometric needed).

A coupling is any module called as ``F(x, edge_index)`` with ``x`` of shape ``(num_nodes, features)`` and
``edge_index`` a ``(2, E)`` long tensor of (source, target) pairs, messages flowing source → target (PyG's
convention), so PyG's ``GCNConv``, ``GATConv`` and ``SAGEConv`` plug in unchanged. Shipped here:

* :class:`GCNCoupling` -- thesis eq. (7.5), Kipf & Welling's GCN:
      F_θ(X) = D̂^{-1/2} Â D̂^{-1/2} X W + b,   Â = A + I,  D̂_ii = Σ_j Â_ij
  (self loops replace any in the input; edges are used as given, so pass both directions of an undirected
  graph). The normalised adjacency is built once per graph as a CSR matrix (and its transpose for the
  backward pass) and cached; one application is one sparse-dense product.
* :class:`GATCoupling` -- graph attention (Veličković et al.), thesis §3.1 "GraphCON-GAT":
      F_θ(X)_i = Σ_{j ∈ N(i) ∪ {i}} a_ij W X_j,
      a_ij = softmax_j(LeakyReLU_0.2(aᵀ[W X_i ‖ W X_j])),
  ``heads`` attention heads concatenated (``concat=True``) or averaged.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor, nn
from torch.nn import functional as F


def check_edge_index(edge_index, num_nodes: int | None = None, name: str = "edge_index") -> Tensor:
    """Validate a ``(2, E)`` integer tensor of node indices (ValueError/TypeError naming ``name``)."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{name}: expected a (2, E) integer tensor, got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"{name}: expected shape (2, E), got {tuple(edge_index.shape)}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name}: expected an integer (long) tensor, got {edge_index.dtype}")
    if edge_index.numel() and num_nodes is not None:
        low, high = int(edge_index.min()), int(edge_index.max())
        if low < 0 or high >= num_nodes:
            raise ValueError(f"{name}: node indices must lie in [0, {num_nodes}), got [{low}, {high}]")
    return edge_index.long()


def _with_self_loops(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """(source, target) with existing self loops removed and one self loop per node appended."""
    src, dst = edge_index[0], edge_index[1]
    keep = src != dst
    loop = torch.arange(num_nodes, device=edge_index.device)
    return torch.cat([src[keep], loop]), torch.cat([dst[keep], loop])


def gcn_norm_matrix(edge_index: Tensor, num_nodes: int, dtype=torch.float32) -> Tensor:
    """The sparse ``(num_nodes, num_nodes)`` matrix D̂^{-1/2}(A + I)D̂^{-1/2} in COO form, rows = targets."""
    src, dst = _with_self_loops(edge_index, num_nodes)
    deg = torch.zeros(num_nodes, dtype=dtype, device=edge_index.device).index_add_(
        0, dst, torch.ones(dst.shape[0], dtype=dtype, device=edge_index.device))
    inv_sqrt = deg.pow(-0.5)
    inv_sqrt[torch.isinf(inv_sqrt)] = 0.0
    values = inv_sqrt[src] * inv_sqrt[dst]
    return torch.sparse_coo_tensor(torch.stack([dst, src]), values, (num_nodes, num_nodes),
                                   check_invariants=False).coalesce()


class SparseOperator:
    """A constant CSR matrix M with its cached transpose, as one object (not a tensor or a tuple: ``torch.func``
    transforms would try to wrap the sparse CSR tensors inside and fail)."""

    __slots__ = ("matrix", "transpose")

    def __init__(self, matrix: Tensor, transpose: Tensor):
        self.matrix, self.transpose = matrix, transpose

    def transposed(self) -> "SparseOperator":
        return SparseOperator(self.transpose, self.matrix)


class _SpMM(torch.autograd.Function):
    """``apply(operator, x)``: y = M x (:class:`SparseOperator`). Backward: grad_x = Mᵀ g, itself differentiable
    (a second derivative goes through it); forward mode: M ẋ. So ``torch.autograd.forward_ad`` and ``torch.func``'s
    ``grad``, ``jvp`` and ``jacrev`` work through it."""

    @staticmethod
    def forward(operator: SparseOperator, x: Tensor) -> Tensor:
        return operator.matrix @ x

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.operator = inputs[0]

    @staticmethod
    def backward(ctx, grad: Tensor):
        return None, _SpMM.apply(ctx.operator.transposed(), grad.contiguous())

    @staticmethod
    def jvp(ctx, _operator_dot, x_dot: Tensor) -> Tensor:
        return _SpMM.apply(ctx.operator, x_dot.contiguous())  # (not M @ ẋ: torch.func.jvp hands a wrapped ẋ)

    @staticmethod
    def vmap(info, in_dims, operator: SparseOperator, x: Tensor):
        """A batch of x (N, F) as one product: the batch moved next to the features, (N, batch·F)."""
        if in_dims[1] is None:
            return _SpMM.apply(operator, x), None
        x = x.movedim(in_dims[1], 1)
        return _SpMM.apply(operator, x.reshape(x.shape[0], -1).contiguous()).reshape(x.shape), 1


class _Propagator:
    """Cache of the normalised CSR matrix (and its transpose) per (graph tensor, node count, dtype, device)."""

    def __init__(self, size: int = 4):
        self.size, self.entries = size, {}

    def get(self, edge_index: Tensor, num_nodes: int, dtype, device, build) -> tuple[Tensor, Tensor]:
        # the tensor itself (held by the entry, so its id is not reused; its storage may be out of reach under a
        # torch.func transform) and its version: an edit in place makes a new entry
        key = (id(edge_index), tuple(edge_index.shape), edge_index._version, num_nodes, dtype, str(device))
        hit = self.entries.get(key)
        if hit is not None and hit[0] is edge_index:
            return hit[1]
        # built from the plain graph tensor outside any torch.func transform (which cannot hold sparse tensors)
        with warnings.catch_warnings(), torch._C._DisableFuncTorch():  # "sparse CSR support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            coo = build(edge_index, num_nodes, dtype)
            matrix = coo.to_sparse_csr()
            transpose = coo.t().coalesce().to_sparse_csr()
        if len(self.entries) >= self.size:
            self.entries.pop(next(iter(self.entries)))
        self.entries[key] = (edge_index, (matrix, transpose))
        return matrix, transpose


class GCNCoupling(nn.Module):
    """GCN coupling (thesis eq. 7.5): ``F(x, edge_index) = D̂^{-1/2}(A + I)D̂^{-1/2} x W + b``.

    ``weight`` is stored as ``(out_features, in_features)`` like ``nn.Linear`` (so ``x W`` above is
    ``x @ weight.T``) and Glorot-uniform initialised as PyG's ``GCNConv``; ``bias`` starts at zero. The
    linear map is applied before the propagation when it does not widen the features (fewer sparse flops).
    """

    def __init__(self, in_features: int, out_features: int | None = None, bias: bool = True):
        super().__init__()
        out_features = in_features if out_features is None else out_features
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self._cache = _Propagator()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    def propagate(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """D̂^{-1/2}(A + I)D̂^{-1/2} x for ``x`` of shape (num_nodes, features)."""
        matrix, transpose = self._cache.get(edge_index, x.shape[0], x.dtype, x.device, gcn_norm_matrix)
        return _SpMM.apply(SparseOperator(matrix, transpose), x.contiguous())

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x: expected shape (num_nodes, {self.in_features}), got {tuple(x.shape)}")
        if self.out_features <= self.in_features:
            out = self.propagate(F.linear(x, self.weight), edge_index)
        else:
            out = F.linear(self.propagate(x, edge_index), self.weight)
        return out if self.bias is None else out + self.bias


def _segment_softmax(scores: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Softmax of ``scores`` (E, H) over the edges sharing a target ``index`` (E,)."""
    heads = scores.shape[1]
    expanded = index.unsqueeze(1).expand(-1, heads)
    top = scores.new_full((num_nodes, heads), -math.inf).scatter_reduce(0, expanded, scores, "amax", include_self=True)
    exp = (scores - top[index]).exp()
    total = scores.new_zeros(num_nodes, heads).index_add_(0, index, exp)
    return exp / total[index]


class GATCoupling(nn.Module):
    """Graph attention coupling (thesis §3.1, GraphCON-GAT), plain torch, self loops added:

        F(X)_i = Σ_{j ∈ N(i) ∪ {i}} a_ij W X_j,  a_ij = softmax_j LeakyReLU_0.2(a_srcᵀ W X_j + a_dstᵀ W X_i)

    (a = [a_dst ‖ a_src] of the paper). ``heads`` heads of width ``out_features`` each, concatenated
    (``concat=True``: output ``heads * out_features``) or averaged. Glorot-initialised like PyG's GATConv.
    """

    def __init__(self, in_features: int, out_features: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, bias: bool = True):
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        self.in_features, self.out_features, self.heads, self.concat = in_features, out_features, heads, concat
        self.negative_slope = float(negative_slope)
        self.weight = nn.Parameter(torch.empty(heads * out_features, in_features))
        self.att_src = nn.Parameter(torch.empty(1, heads, out_features))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_features))
        width = heads * out_features if concat else out_features
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        n, H, C = x.shape[0], self.heads, self.out_features
        h = F.linear(x, self.weight).view(n, H, C)
        src, dst = _with_self_loops(edge_index, n)
        alpha_src, alpha_dst = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)  # (n, H)
        scores = F.leaky_relu(alpha_src[src] + alpha_dst[dst], self.negative_slope)
        weights = _segment_softmax(scores, dst, n)  # (E, H)
        out = h.new_zeros(n, H, C).index_add_(0, dst, h[src] * weights.unsqueeze(-1))
        out = out.reshape(n, H * C) if self.concat else out.mean(1)
        return out if self.bias is None else out + self.bias


class HeadMean(nn.Module):
    """The official GAT variants' coupling: ``act(conv(x)).view(n, -1, heads).mean(-1)`` (ELU, 4 heads),
    with the activation inside the mean -- use with ``activation="identity"`` in the system."""

    def __init__(self, conv: nn.Module, heads: int = 4, activation=F.elu):
        super().__init__()
        self.conv, self.heads, self.activation = conv, heads, activation

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        out = self.activation(self.conv(x, edge_index))
        return out.view(x.shape[0], -1, self.heads).mean(-1)
