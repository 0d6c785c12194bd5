"""Generated graphs for node classification and oversmoothing studies (plain torch, seeded, offline).

* :func:`grid_graph` -- the 4-neighbour rows × cols grid (thesis Figs. 7.2 / 8.2: 10 × 10); PyG's
  ``utils.grid`` is 8-neighbour with self loops, i.e. the wrong graph.
* :func:`random_partition_graph` -- C equal classes, average degree d, node homophily h: every edge leaves a
  uniformly drawn node and lands in its own class with probability h, elsewhere otherwise (the model of PyG's
  ``RandomPartitionGraphDataset``, generated here without PyG); features = noisy class means.
* :func:`stochastic_block_model` -- blocks of given sizes with a block-pair edge-probability matrix.
* :func:`homophily` -- edge homophily (fraction of intra-class edges) or node homophily (Pei et al. 2020, the
  measure quoted in the thesis tables).

Every graph is a :class:`GraphData`: ``x`` (v, f), ``edge_index`` (2, E) both directions of each undirected
edge, no self loops, ``y`` (v,), boolean ``train_mask`` / ``val_mask`` / ``test_mask``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class GraphData:
    """One graph with node features, labels and a split (masks may be (v, k) for k fixed splits)."""

    x: Tensor
    edge_index: Tensor
    y: Tensor
    train_mask: Tensor | None = None
    val_mask: Tensor | None = None
    test_mask: Tensor | None = None
    name: str = "graph"
    meta: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1 if self.y.numel() else 0

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    def split(self, k: int) -> "GraphData":
        """The graph with the k-th of several stacked splits (masks of shape (v, splits)) selected."""
        pick = lambda m: m[:, k] if m is not None and m.dim() == 2 else m
        return GraphData(self.x, self.edge_index, self.y, pick(self.train_mask), pick(self.val_mask),
                         pick(self.test_mask), f"{self.name}[{k}]", dict(self.meta))

    def to(self, device) -> "GraphData":
        move = lambda t: None if t is None else t.to(device)
        return GraphData(move(self.x), move(self.edge_index), move(self.y), move(self.train_mask),
                         move(self.val_mask), move(self.test_mask), self.name, dict(self.meta))

    def to_pyg(self):
        """A ``torch_geometric.data.Data`` (needs ``pip install odelab[graph]``)."""
        try:
            from torch_geometric.data import Data
        except ImportError as err:
            raise ImportError("to_pyg needs PyTorch Geometric; install it with `pip install odelab[graph]`") from err
        return Data(x=self.x, edge_index=self.edge_index, y=self.y, train_mask=self.train_mask,
                    val_mask=self.val_mask, test_mask=self.test_mask)

    def summary(self) -> dict:
        return {"name": self.name, "nodes": self.num_nodes, "edges": self.num_edges, "features": self.num_features,
                "classes": self.num_classes, "edge_homophily": homophily(self.edge_index, self.y, "edge"),
                **self.meta}


def _check_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return value


def _check_float(name: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name}: expected a number in [{low}, {high}], got {value!r}")
    return float(value)


def undirected(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Both directions of every edge, self loops and duplicates removed, sorted by (target, source)."""
    src, dst = edge_index
    keep = src != dst
    src, dst = src[keep], dst[keep]
    both = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    key = torch.unique(both[1] * num_nodes + both[0])
    return torch.stack([key % num_nodes, key // num_nodes])


def grid_graph(rows: int = 10, cols: int = 10) -> Tensor:
    """edge_index of the 4-neighbour ``rows × cols`` grid (node r·cols + c), both directions."""
    rows, cols = _check_int("rows", rows), _check_int("cols", cols)
    idx = torch.arange(rows * cols).view(rows, cols)
    right = torch.stack([idx[:, :-1].reshape(-1), idx[:, 1:].reshape(-1)])
    down = torch.stack([idx[:-1, :].reshape(-1), idx[1:, :].reshape(-1)])
    return undirected(torch.cat([right, down], 1), rows * cols)


def homophily(edge_index: Tensor, y: Tensor, method: str = "edge") -> float:
    """``"edge"``: fraction of edges joining equal labels; ``"node"``: mean over nodes with neighbours of the
    fraction of their neighbours sharing their label (Pei et al. 2020)."""
    if edge_index.numel() == 0:
        return float("nan")
    same = (y[edge_index[0]] == y[edge_index[1]]).double()
    if method == "edge":
        return float(same.mean())
    if method == "node":
        n = y.shape[0]
        hits = torch.zeros(n, dtype=torch.float64).index_add_(0, edge_index[1], same)
        deg = torch.zeros(n, dtype=torch.float64).index_add_(0, edge_index[1], torch.ones_like(same))
        has = deg > 0
        return float((hits[has] / deg[has]).mean())
    raise ValueError(f"method: expected 'edge' or 'node', got {method!r}")


def class_split(y: Tensor, train_per_class: int, val_per_class: int, generator: torch.Generator) -> tuple[Tensor, ...]:
    """Masks with ``train_per_class`` and ``val_per_class`` random nodes of every class; the rest is test."""
    n = y.shape[0]
    train, val = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    for c in range(int(y.max()) + 1):
        members = torch.nonzero(y == c).flatten()
        members = members[torch.randperm(members.numel(), generator=generator)]
        train[members[:train_per_class]] = True
        val[members[train_per_class:train_per_class + val_per_class]] = True
    return train, val, ~(train | val)


def class_features(y: Tensor, num_features: int, noise: float, generator: torch.Generator,
                   separation: float = 1.0) -> Tensor:
    """x_i = separation · μ_{y_i} + noise · ε_i with μ_c, ε_i ~ N(0, I)."""
    classes = int(y.max()) + 1
    means = torch.randn(classes, num_features, generator=generator) * separation
    return means[y] + noise * torch.randn(y.shape[0], num_features, generator=generator)


def random_partition_graph(num_classes: int = 5, nodes_per_class: int = 200, average_degree: float = 5.0,
                           homophily_ratio: float = 0.8, num_features: int = 16, noise: float = 1.0, *,
                           train_per_class: int = 20, val_per_class: int = 30, seed: int = 0) -> GraphData:
    """A random partition graph (see module docstring): ``num_classes`` × ``nodes_per_class`` nodes, about
    ``average_degree`` neighbours per node of which a fraction ``homophily_ratio`` in the node's class.
    Features: class means plus Gaussian ``noise`` (per-node SNR ≈ 1/noise per feature). Seeded."""
    C, k = _check_int("num_classes", num_classes, 2), _check_int("nodes_per_class", nodes_per_class, 2)
    d = _check_float("average_degree", average_degree, 0.0, float(C * k - 1))
    h = _check_float("homophily_ratio", homophily_ratio, 0.0, 1.0)
    _check_int("num_features", num_features)
    _check_float("noise", noise, 0.0, float("inf"))
    g = torch.Generator().manual_seed(seed)
    n = C * k
    y = torch.arange(C).repeat_interleave(k)
    m = int(round(n * d / 2))  # undirected edges
    src = torch.randint(0, n, (m,), generator=g)
    intra = torch.rand(m, generator=g) < h
    # target class: own class (intra) or a uniformly drawn other class
    shift = torch.randint(1, C, (m,), generator=g)
    cls = torch.where(intra, y[src], (y[src] + shift) % C)
    dst = cls * k + torch.randint(0, k, (m,), generator=g)
    edge_index = undirected(torch.stack([src, dst]), n)
    x = class_features(y, num_features, noise, g)
    train, val, test = class_split(y, train_per_class, val_per_class, g)
    return GraphData(x, edge_index, y, train, val, test, f"partition(h={h:g})",
                     {"homophily_ratio": h, "average_degree": d, "seed": seed, "noise": noise})


def stochastic_block_model(block_sizes: list[int] | tuple[int, ...], edge_probs, num_features: int = 16,
                           noise: float = 1.0, *, train_per_class: int = 20, val_per_class: int = 30,
                           seed: int = 0) -> GraphData:
    """Stochastic block model: node i in block b_i, edge {i, j} with probability ``edge_probs[b_i][b_j]``
    (a symmetric (B, B) matrix), labels = blocks, features = noisy block means. Dense sampling of the
    upper triangle: meant for up to ~10⁴ nodes."""
    sizes = [_check_int("block_sizes[]", s) for s in block_sizes]
    probs = torch.as_tensor(edge_probs, dtype=torch.float64)
    B = len(sizes)
    if probs.shape != (B, B) or not torch.allclose(probs, probs.T) or (probs < 0).any() or (probs > 1).any():
        raise ValueError(f"edge_probs: expected a symmetric ({B}, {B}) matrix of probabilities, got {tuple(probs.shape)}")
    g = torch.Generator().manual_seed(seed)
    y = torch.repeat_interleave(torch.arange(B), torch.tensor(sizes))
    n = y.shape[0]
    iu = torch.triu_indices(n, n, 1)
    p = probs[y[iu[0]], y[iu[1]]]
    keep = torch.rand(p.shape, generator=g, dtype=torch.float64) < p
    edge_index = undirected(iu[:, keep], n)
    x = class_features(y, num_features, noise, g)
    train, val, test = class_split(y, train_per_class, val_per_class, g)
    return GraphData(x, edge_index, y, train, val, test, "sbm", {"block_sizes": sizes, "seed": seed})


def pyg_random_partition_graph(num_classes: int = 5, nodes_per_class: int = 200, average_degree: float = 5.0,
                               homophily_ratio: float = 0.8, num_features: int = 16, *, root: str,
                               seed: int = 0) -> GraphData:
    """The same kind of graph from PyG's ``RandomPartitionGraphDataset`` (generated locally into ``root``;
    needs ``pip install odelab[graph]``: torch-geometric and scikit-learn); labels and features are PyG's."""
    try:
        from torch_geometric.datasets import RandomPartitionGraphDataset
        import sklearn  # noqa: F401  (PyG's generator draws its features with sklearn's make_classification)
    except ImportError as err:
        raise ImportError("pyg_random_partition_graph needs PyTorch Geometric and scikit-learn; install them with "
                          "`pip install odelab[graph]` (torch-geometric, scikit-learn); the plain-torch "
                          "random_partition_graph needs neither") from err
    torch.manual_seed(seed)
    ds = RandomPartitionGraphDataset(root, num_classes=num_classes, num_nodes_per_class=nodes_per_class,
                                     node_homophily_ratio=homophily_ratio, average_degree=average_degree,
                                     num_channels=num_features)
    data = ds[0]
    g = torch.Generator().manual_seed(seed)
    train, val, test = class_split(data.y, 20, 30, g)
    return GraphData(data.x, data.edge_index, data.y, train, val, test, f"pyg-partition(h={homophily_ratio:g})",
                     {"homophily_ratio": homophily_ratio, "seed": seed})


__all__ = ["GraphData", "grid_graph", "random_partition_graph", "stochastic_block_model", "homophily",
           "class_split", "undirected", "pyg_random_partition_graph"]
