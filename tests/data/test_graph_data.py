"""Graph generators and the local-file loaders (Planetoid raw format, WebKB / Geom-GCN format) on fixture
files written here; missing files raise FileNotFoundError naming them."""
import os
import pickle
from collections import defaultdict

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from odelab.data.graph_files import load_graph, load_planetoid, load_webkb
from odelab.data.graphs import grid_graph, homophily, random_partition_graph, stochastic_block_model


# -- generators -----------------------------------------------------------------------------------------------
def test_grid_is_4_neighbour_10x10():
    e = grid_graph(10, 10)
    assert e.shape == (2, 2 * (2 * 10 * 9))  # 180 undirected edges, both directions
    pairs = set(map(tuple, e.T.tolist()))
    assert all((b, a) in pairs for a, b in pairs) and all(a != b for a, b in pairs)
    deg = torch.bincount(e[1], minlength=100)
    assert deg.min() == 2 and deg.max() == 4 and int((deg == 2).sum()) == 4  # 4 corners
    for a, b in pairs:  # neighbours differ by one step in exactly one coordinate
        (ra, ca), (rb, cb) = divmod(a, 10), divmod(b, 10)
        assert abs(ra - rb) + abs(ca - cb) == 1


@pytest.mark.parametrize("h", [0.0, 0.5, 0.9])
def test_random_partition_graph_homophily_and_split(h):
    g = random_partition_graph(4, 150, 6.0, h, 8, noise=0.5, seed=3)
    assert g.x.shape == (600, 8) and g.num_classes == 4
    assert abs(homophily(g.edge_index, g.y, "edge") - h) < 0.04
    assert abs(g.num_edges / g.num_nodes - 6.0) < 0.5
    masks = torch.stack([g.train_mask, g.val_mask, g.test_mask])
    assert bool((masks.sum(0) == 1).all())
    assert torch.bincount(g.y[g.train_mask]).tolist() == [20] * 4
    again = random_partition_graph(4, 150, 6.0, h, 8, noise=0.5, seed=3)
    assert torch.equal(g.edge_index, again.edge_index) and torch.equal(g.x, again.x)
    assert not torch.equal(g.x, random_partition_graph(4, 150, 6.0, h, 8, noise=0.5, seed=4).x)


def test_features_are_noisy_class_means():
    g = random_partition_graph(3, 400, 4.0, 0.8, 5, noise=0.1, seed=0)
    means = torch.stack([g.x[g.y == c].mean(0) for c in range(3)])
    spread = torch.stack([g.x[g.y == c].std(0) for c in range(3)])
    assert (spread - 0.1).abs().max() < 0.02
    assert torch.cdist(means, means).add(torch.eye(3) * 1e9).min() > 0.5


def test_node_homophily_by_hand():
    # path 0-1-2 with labels 0, 0, 1: node 0 -> 1/1, node 1 -> 1/2, node 2 -> 0/1
    e = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    y = torch.tensor([0, 0, 1])
    assert homophily(e, y, "node") == pytest.approx((1 + 0.5 + 0) / 3)
    assert homophily(e, y, "edge") == pytest.approx(0.5)


def test_stochastic_block_model():
    g = stochastic_block_model([60, 40], [[0.3, 0.0], [0.0, 0.2]], 4, seed=1)
    assert g.num_nodes == 100 and homophily(g.edge_index, g.y) == 1.0
    within0 = int(((g.y[g.edge_index[0]] == 0)).sum()) / 2
    assert abs(within0 - 0.3 * 60 * 59 / 2) < 4 * np.sqrt(0.3 * 0.7 * 60 * 59 / 2)
    with pytest.raises(ValueError, match="edge_probs"):
        stochastic_block_model([5, 5], [[0.1, 0.2], [0.3, 0.1]])


def test_generator_errors_name_the_argument():
    with pytest.raises(ValueError, match="homophily_ratio"):
        random_partition_graph(homophily_ratio=1.5)
    with pytest.raises(ValueError, match="num_classes"):
        random_partition_graph(num_classes=1)
    with pytest.raises(ValueError, match="rows"):
        grid_graph(0, 3)


# -- Planetoid fixture ----------------------------------------------------------------------------------------
def write_planetoid(folder, name, *, test_index, n_allx=5, n_train=2, features=4, classes=3, graph=None, seed=0):
    """The raw Planetoid files: x/tx/allx scipy CSR, y/ty/ally one-hot numpy, graph a defaultdict of lists,
    pickled with protocol 2 (the originals are Python 2 pickles); test.index one id per line."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    allx = rng.integers(0, 2, (n_allx, features)).astype(np.float32)
    tx = rng.integers(0, 2, (len(test_index), features)).astype(np.float32) + np.arange(1, len(test_index) + 1)[:, None] * 10
    ally = np.eye(classes)[rng.integers(0, classes, n_allx)]
    ty = np.eye(classes)[rng.integers(0, classes, len(test_index))]
    parts = {"x": sp.csr_matrix(allx[:n_train]), "allx": sp.csr_matrix(allx), "tx": sp.csr_matrix(tx),
             "y": ally[:n_train], "ally": ally, "ty": ty, "graph": graph}
    for key, value in parts.items():
        with open(os.path.join(folder, f"ind.{name}.{key}"), "wb") as fh:
            pickle.dump(value, fh, protocol=2)
    with open(os.path.join(folder, f"ind.{name}.test.index"), "w") as fh:
        fh.write("\n".join(str(i) for i in test_index) + "\n")
    return allx, tx, ally, ty


def chain_graph(n, cut=None):
    g = defaultdict(list)
    for i in range(n - 1):
        if i != cut:
            g[i].append(i + 1)
            g[i + 1].append(i)
    return g


def test_planetoid_reorders_test_nodes(tmp_path):
    # 5 allx nodes (0-4), 3 test nodes listed out of order: tx row k belongs to node test_index[k]
    test_index = [7, 5, 6]
    allx, tx, ally, ty = write_planetoid(tmp_path / "Cora" / "raw", "cora", test_index=test_index,
                                         graph=chain_graph(8))
    g = load_planetoid("Cora", str(tmp_path), val_size=2)
    assert g.num_nodes == 8 and g.x.shape == (8, 4)
    assert torch.equal(g.x[:5], torch.tensor(allx))
    for k, node in enumerate(test_index):
        assert torch.equal(g.x[node], torch.tensor(tx[k]))
        assert int(g.y[node]) == int(ty[k].argmax())
    assert g.train_mask.tolist() == [True, True] + [False] * 6
    assert g.val_mask.tolist() == [False, False, True, True] + [False] * 4
    assert g.test_mask.tolist() == [False] * 5 + [True] * 3
    assert g.num_edges == 14  # 7 undirected chain edges, both directions


def test_planetoid_matches_pyg_reader(tmp_path):
    io = pytest.importorskip("torch_geometric.io")
    # PyG's reader takes the public split's 500 validation nodes: the fixture needs more than 502 nodes
    write_planetoid(tmp_path, "cora", test_index=[505, 503, 504], n_allx=503, graph=chain_graph(506))
    ours = load_planetoid("cora", str(tmp_path))
    theirs = io.read_planetoid_data(str(tmp_path), "cora")
    assert torch.equal(ours.x, theirs.x) and torch.equal(ours.y, theirs.y)
    assert set(map(tuple, ours.edge_index.T.tolist())) == set(map(tuple, theirs.edge_index.T.tolist()))
    for mask in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(ours, mask), getattr(theirs, mask))


def test_citeseer_isolated_test_nodes_get_zero_rows(tmp_path):
    # test ids 5 and 7 only: node 6 is an isolated test node missing from tx -> zero features
    allx, tx, _, _ = write_planetoid(tmp_path, "citeseer", test_index=[7, 5], graph=chain_graph(8))
    g = load_planetoid("citeseer", str(tmp_path), val_size=1)
    assert g.num_nodes == 8
    assert torch.equal(g.x[7], torch.tensor(tx[0])) and torch.equal(g.x[5], torch.tensor(tx[1]))
    assert bool((g.x[6] == 0).all())


def test_planetoid_largest_connected_component(tmp_path):
    write_planetoid(tmp_path, "pubmed", test_index=[5, 6, 7], graph=chain_graph(8, cut=4))  # {0..4}, {5..7}
    g = load_planetoid("pubmed", str(tmp_path), largest_component_only=True, val_size=1)
    full = load_planetoid("pubmed", str(tmp_path), val_size=1)
    assert g.num_nodes == 5 and torch.equal(g.x, full.x[:5])
    assert int(g.test_mask.sum()) == 0 and int(g.train_mask.sum()) == 2
    assert int(g.edge_index.max()) == 4 and g.num_edges == 8


def test_planetoid_missing_files_are_named(tmp_path):
    write_planetoid(tmp_path, "cora", test_index=[5], graph=chain_graph(6))
    os.remove(tmp_path / "ind.cora.graph")
    os.remove(tmp_path / "ind.cora.ty")
    with pytest.raises(FileNotFoundError) as err:
        load_planetoid("cora", str(tmp_path))
    message = str(err.value)
    assert "ind.cora.graph" in message and "ind.cora.ty" in message
    assert "ind.cora.allx" not in message and "ind.cora.x," not in message
    with pytest.raises(FileNotFoundError, match="ind.citeseer.x"):
        load_graph("Citeseer", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="name"):
        load_planetoid("cora-full", str(tmp_path))


# -- WebKB fixture --------------------------------------------------------------------------------------------
def write_webkb(folder, name, *, splits=10, nodes=6, features=3, skip_split=None, split_folder=None):
    rng = np.random.default_rng(1)
    os.makedirs(folder, exist_ok=True)
    x = rng.integers(0, 2, (nodes, features))
    y = rng.integers(0, 5, nodes)
    order = rng.permutation(nodes)  # rows in scrambled order, as ids
    with open(os.path.join(folder, "out1_node_feature_label.txt"), "w") as fh:
        fh.write("node_id\tfeature\tlabel\n")
        for i in order:
            fh.write(f"{i}\t{','.join(str(v) for v in x[i])}\t{y[i]}\n")
    edges = [(0, 1), (1, 2), (3, 2), (4, 5), (5, 0)]
    with open(os.path.join(folder, "out1_graph_edges.txt"), "w") as fh:
        fh.write("node_id\tnode_id\n")
        fh.writelines(f"{a}\t{b}\n" for a, b in edges)
    split_folder = split_folder or folder
    os.makedirs(split_folder, exist_ok=True)
    masks = []
    for k in range(splits):
        if k == skip_split:
            continue
        perm = np.random.default_rng(k).permutation(nodes)
        tr, va, te = (np.zeros(nodes, dtype=np.uint8) for _ in range(3))
        tr[perm[:3]], va[perm[3:4]], te[perm[4:]] = 1, 1, 1
        np.savez(os.path.join(split_folder, f"{name}_split_0.6_0.2_{k}.npz"), train_mask=tr, val_mask=va, test_mask=te)
        masks.append((tr, va, te))
    return x, y, edges, masks


def test_webkb_features_labels_edges_and_splits(tmp_path):
    x, y, edges, masks = write_webkb(tmp_path / "texas" / "raw", "texas")
    g = load_webkb("Texas", str(tmp_path))
    assert torch.equal(g.x, torch.tensor(x, dtype=torch.float32)) and torch.equal(g.y, torch.tensor(y))
    pairs = set(map(tuple, g.edge_index.T.tolist()))
    assert pairs == {(a, b) for a, b in edges} | {(b, a) for a, b in edges}
    assert g.train_mask.shape == (6, 10)
    for k in (0, 9):
        one = g.split(k)
        assert one.train_mask.tolist() == masks[k][0].astype(bool).tolist()
        assert one.test_mask.tolist() == masks[k][2].astype(bool).tolist()
    directed = load_webkb("texas", str(tmp_path), to_undirected=False)
    assert set(map(tuple, directed.edge_index.T.tolist())) == set(edges)


def test_webkb_splits_in_a_splits_folder(tmp_path):
    write_webkb(tmp_path / "cornell", "cornell", split_folder=tmp_path / "splits")
    assert load_webkb("cornell", str(tmp_path)).val_mask.shape == (6, 10)


def test_webkb_missing_split_is_named(tmp_path):
    write_webkb(tmp_path, "wisconsin", skip_split=3)
    with pytest.raises(FileNotFoundError) as err:
        load_webkb("wisconsin", str(tmp_path))
    message = str(err.value)
    assert "wisconsin_split_0.6_0.2_3.npz" in message and "_2.npz" not in message
    os.remove(tmp_path / "out1_graph_edges.txt")
    with pytest.raises(FileNotFoundError, match="out1_graph_edges.txt"):
        load_webkb("wisconsin", str(tmp_path))


def test_pyg_generator_error_names_the_extra(tmp_path):
    try:
        import sklearn  # noqa: F401
        import torch_geometric  # noqa: F401
    except ImportError:
        from odelab.data.graphs import pyg_random_partition_graph

        with pytest.raises(ImportError, match=r"odelab\[graph\]"):
            pyg_random_partition_graph(root=str(tmp_path))
    else:
        from odelab.data.graphs import pyg_random_partition_graph

        g = pyg_random_partition_graph(3, 40, 4.0, 0.9, 8, root=str(tmp_path), seed=0)
        assert g.num_nodes == 120 and homophily(g.edge_index, g.y, "node") > 0.7
