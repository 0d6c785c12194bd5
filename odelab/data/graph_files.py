"""Loaders for graph benchmarks the user already has on disk (``--data-root``); nothing is ever downloaded.

* :func:`load_planetoid` -- Cora, Citeseer, Pubmed in the original Planetoid format (Yang et al. 2016, as
  distributed by kimiyoung/planetoid and read by Kipf's GCN code and PyG): ``ind.<name>.{x, tx, allx}``
  (scipy sparse feature matrices), ``ind.<name>.{y, ty, ally}`` (numpy one-hot labels), all pickled (Python 2
  pickles: read with ``encoding="latin1"``), ``ind.<name>.graph`` (a pickled dict node → list of neighbours)
  and ``ind.<name>.test.index`` (one test node id per line). Public split: the first ``len(y)`` nodes train,
  the next 500 validation, the test index test. ``largest_component=True`` keeps the largest connected
  component only (the GraphCON protocol, Shchur et al. 2018), masks restricted to it.
* :func:`load_webkb` -- Texas, Wisconsin, Cornell in the Geom-GCN format (Pei et al. 2020):
  ``out1_node_feature_label.txt`` (header, then ``id<TAB>f1,f2,...<TAB>label``), ``out1_graph_edges.txt``
  (header, then ``src<TAB>dst``) and the 10 splits ``<name>_split_0.6_0.2_<k>.npz`` (``train_mask``,
  ``val_mask``, ``test_mask``), stacked as (v, 10) masks (``GraphData.split(k)`` selects one).

Files are looked up in ``<root>/<Name>/raw`` (PyG's layout), ``<root>/<name>/raw``, ``<root>/<Name>``,
``<root>/<name>`` and ``<root>`` (and ``<root>/splits`` for the WebKB splits); a missing file raises
FileNotFoundError naming every missing file and the directories searched.
"""
from __future__ import annotations

import os
import pickle

import numpy as np
import torch

from .graphs import GraphData, undirected

PLANETOID = ("cora", "citeseer", "pubmed")
WEBKB = ("texas", "wisconsin", "cornell")
PLANETOID_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def _dirs(root: str, name: str, extra: tuple[str, ...] = ()) -> list[str]:
    cap = name.capitalize()
    dirs = [os.path.join(root, cap, "raw"), os.path.join(root, name, "raw"), os.path.join(root, cap),
            os.path.join(root, name), root]
    dirs += [os.path.join(root, e) for e in extra]
    seen, out = set(), []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _find(root: str, name: str, files: list[str], what: str, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Path of every file in ``files`` (first directory holding it); FileNotFoundError listing the missing."""
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root: expected a directory path, got {type(root).__name__}")
    root = os.fspath(root)
    dirs = _dirs(root, name, extra)
    found, missing = {}, []
    for f in files:
        for d in dirs:
            path = os.path.join(d, f)
            if os.path.isfile(path):
                found[f] = path
                break
        else:
            missing.append(f)
    if missing:
        raise FileNotFoundError(
            f"{what}: missing {len(missing)} file(s) under --data-root {root!r}: {', '.join(missing)} "
            f"(searched {', '.join(dirs)}); odelab never downloads -- copy the files there")
    return found


def _unpickle(path: str):
    with open(path, "rb") as fh:
        return pickle.load(fh, encoding="latin1")


def _dense(a) -> np.ndarray:
    return np.asarray(a.todense() if hasattr(a, "todense") else a)


def largest_component(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Boolean mask of the nodes in the largest (weakly) connected component."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    e = edge_index.numpy()
    adj = coo_matrix((np.ones(e.shape[1]), (e[0], e[1])), shape=(num_nodes, num_nodes))
    _, labels = connected_components(adj, directed=True, connection="weak")
    biggest = np.bincount(labels).argmax()
    return torch.from_numpy(labels == biggest)


def subgraph(graph: GraphData, keep: torch.Tensor) -> GraphData:
    """The graph induced by the boolean node mask ``keep`` (nodes renumbered in order)."""
    index = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    index[keep] = torch.arange(int(keep.sum()))
    src, dst = graph.edge_index
    both = keep[src] & keep[dst]
    edge_index = torch.stack([index[src[both]], index[dst[both]]])
    cut = lambda m: None if m is None else m[keep]
    meta = dict(graph.meta, largest_component=True, original_nodes=graph.num_nodes)
    return GraphData(graph.x[keep], edge_index, graph.y[keep], cut(graph.train_mask), cut(graph.val_mask),
                     cut(graph.test_mask), graph.name, meta)


def load_planetoid(name: str, root: str, *, largest_component_only: bool = False, val_size: int = 500) -> GraphData:
    """Cora / Citeseer / Pubmed from the raw Planetoid files under ``root`` (see module docstring)."""
    if not isinstance(name, str) or name.lower() not in PLANETOID:
        raise ValueError(f"name: expected one of {list(PLANETOID)}, got {name!r}")
    name = name.lower()
    files = _find(root, name, [f"ind.{name}.{p}" for p in PLANETOID_PARTS], f"Planetoid {name}")
    obj = {p: _unpickle(files[f"ind.{name}.{p}"]) for p in PLANETOID_PARTS if p != "test.index"}
    with open(files[f"ind.{name}.test.index"]) as fh:
        test_index = np.array([int(line) for line in fh if line.strip()], dtype=np.int64)
    allx, tx = _dense(obj["allx"]).astype(np.float32), _dense(obj["tx"]).astype(np.float32)
    ally, ty = np.asarray(obj["ally"]), np.asarray(obj["ty"])
    sorted_test = np.sort(test_index)
    if name == "citeseer":  # isolated test nodes have no features in tx: zero rows (Kipf / PyG)
        span = sorted_test[-1] - sorted_test[0] + 1
        tx_full = np.zeros((span, tx.shape[1]), dtype=np.float32)
        tx_full[sorted_test - sorted_test[0]] = tx
        ty_full = np.zeros((span, ty.shape[1]), dtype=ty.dtype)
        ty_full[sorted_test - sorted_test[0]] = ty
        tx, ty = tx_full, ty_full
    x = np.concatenate([allx, tx])
    labels = np.concatenate([ally, ty])
    x[test_index] = x[sorted_test]
    labels[test_index] = labels[sorted_test]
    y = labels.argmax(1)
    n = x.shape[0]
    graph_dict = obj["graph"]
    rows, cols = [], []
    for node, neighbours in graph_dict.items():
        for nb in neighbours:
            if int(node) < n and int(nb) < n:
                rows.append(int(node))
                cols.append(int(nb))
    edge_index = undirected(torch.tensor([rows, cols], dtype=torch.long).view(2, -1), n)
    n_train = len(np.asarray(obj["y"]))
    train = torch.zeros(n, dtype=torch.bool)
    train[:n_train] = True
    val = torch.zeros(n, dtype=torch.bool)
    val[n_train:n_train + val_size] = True
    test = torch.zeros(n, dtype=torch.bool)
    test[torch.from_numpy(sorted_test)] = True
    graph = GraphData(torch.from_numpy(x), edge_index, torch.from_numpy(y).long(), train, val, test, name,
                      {"source": os.path.dirname(files[f"ind.{name}.x"])})
    if largest_component_only:
        graph = subgraph(graph, largest_component(graph.edge_index, n))
    return graph


def webkb_split_files(name: str, splits: int = 10) -> list[str]:
    return [f"{name}_split_0.6_0.2_{k}.npz" for k in range(splits)]


def load_webkb(name: str, root: str, *, splits: int = 10, to_undirected: bool = True) -> GraphData:
    """Texas / Wisconsin / Cornell from the Geom-GCN files under ``root`` with the ``splits`` Pei et al.
    splits stacked as (v, splits) masks. ``to_undirected``: add the reverse of every edge (the raw lists
    are directed)."""
    if not isinstance(name, str) or name.lower() not in WEBKB:
        raise ValueError(f"name: expected one of {list(WEBKB)}, got {name!r}")
    name = name.lower()
    graph_files = ["out1_node_feature_label.txt", "out1_graph_edges.txt"]
    split_names = webkb_split_files(name, splits)
    files = _find(root, name, graph_files + split_names, f"WebKB {name}", extra=("splits",))
    ids, feats, labels = [], [], []
    with open(files["out1_node_feature_label.txt"]) as fh:
        next(fh)
        for line in fh:
            if not line.strip():
                continue
            node, f, label = line.rstrip("\n").split("\t")
            ids.append(int(node))
            feats.append([float(v) for v in f.split(",")])
            labels.append(int(label))
    order = np.argsort(ids)
    if [ids[i] for i in order] != list(range(len(ids))):
        raise ValueError(f"{files['out1_node_feature_label.txt']}: node ids must be 0..n-1")
    x = torch.tensor(np.asarray(feats, dtype=np.float32)[order])
    y = torch.tensor(np.asarray(labels, dtype=np.int64)[order])
    n = x.shape[0]
    edges = []
    with open(files["out1_graph_edges.txt"]) as fh:
        next(fh)
        for line in fh:
            if line.strip():
                a, b = line.split("\t")[:2]
                edges.append((int(a), int(b)))
    edge_index = torch.tensor(edges, dtype=torch.long).T.reshape(2, -1)
    if to_undirected:
        edge_index = undirected(edge_index, n)
    else:
        key = torch.unique(edge_index[1] * n + edge_index[0])
        edge_index = torch.stack([key % n, key // n])
    masks = {k: [] for k in ("train_mask", "val_mask", "test_mask")}
    for f in split_names:
        with np.load(files[f]) as data:
            for k in masks:
                if k not in data:
                    raise ValueError(f"{files[f]}: no array {k!r} (has {sorted(data.files)})")
                masks[k].append(torch.from_numpy(np.asarray(data[k]).astype(bool)))
    stacked = {k: torch.stack(v, 1) for k, v in masks.items()}
    for k, m in stacked.items():
        if m.shape[0] != n:
            raise ValueError(f"{name} splits: {k} has {m.shape[0]} rows, the graph {n} nodes")
    return GraphData(x, edge_index, y, stacked["train_mask"], stacked["val_mask"], stacked["test_mask"], name,
                     {"splits": splits, "source": os.path.dirname(files["out1_graph_edges.txt"])})


def load_graph(name: str, root: str, **kw) -> GraphData:
    """Any of the above by name (case-insensitive)."""
    key = name.lower() if isinstance(name, str) else name
    if key in PLANETOID:
        return load_planetoid(key, root, **kw)
    if key in WEBKB:
        return load_webkb(key, root, **kw)
    raise ValueError(f"name: expected one of {list(PLANETOID + WEBKB)}, got {name!r}")


__all__ = ["load_planetoid", "load_webkb", "load_graph", "largest_component", "subgraph", "webkb_split_files",
           "PLANETOID", "WEBKB"]
