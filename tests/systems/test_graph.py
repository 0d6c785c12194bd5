"""GraphCON (thesis 7.3/7.4) and G² (8.9/8.4) as graph vector fields: one step of each preset against the
equations written out here with dense matrices, solver coverage (dopri5 with stats), layouts, errors."""
import math

import pytest
import torch

import odelab
from odelab.models.graph import G2Model, GCNModel, GraphCONModel
from odelab.solvers.field import Field
from odelab.solvers.schemes import FIXED_SCHEMES
from odelab.systems.graph import GradientGating, GraphCON
from odelab.systems.graph_coupling import GATCoupling, GCNCoupling

DT = torch.float64


def small_graph(n=12, extra=10, seed=0):
    """A connected undirected graph: a ring plus random chords, both directions, no self loops."""
    g = torch.Generator().manual_seed(seed)
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    chords = torch.randint(0, n, (2, extra), generator=g)
    e = torch.cat([ring, chords], 1)
    e = e[:, e[0] != e[1]]
    e = torch.cat([e, e.flip(0)], 1)
    key = torch.unique(e[0] * n + e[1])
    return torch.stack([key // n, key % n]), n


def dense_adjacency(edge_index, n):
    A = torch.zeros(n, n, dtype=DT)
    for s, d in edge_index.T.tolist():
        A[d, s] = 1.0
    return A


def gcn_reference(X, edge_index, n, W, b):
    """(7.5): D̂^{-1/2}(A + I)D̂^{-1/2} X Wᵀ + b, dense."""
    A = dense_adjacency(edge_index, n) + torch.eye(n, dtype=DT)
    d = A.sum(1).rsqrt()
    return (d[:, None] * A * d[None, :]) @ X @ W.T + b


def graphcon_reference(X, Y, edge_index, n, W, b, alpha, gamma, dt, R=None, r=None):
    """(7.4): Yⁿ = Y + Δt[σ(F(X) + R X) − γX − αY], Xⁿ = X + Δt Yⁿ, σ = ReLU."""
    pre = gcn_reference(X, edge_index, n, W, b)
    if R is not None:
        pre = pre + X @ R.T + r
    Yn = Y + dt * (torch.relu(pre) - gamma * X - alpha * Y)
    return Yn, X + dt * Yn


def g2_reference(X, edge_index, n, W, b, p, dt=1.0, aggregation="mean", Wg=None, bg=None):
    """(8.4): τ̂ = ReLU(F̂(X)), τ_ik = tanh(AGG_j |τ̂_jk − τ̂_ik|^p), Xⁿ = (1 − Δtτ)X + Δtτ ReLU(F(X))."""
    F = torch.relu(gcn_reference(X, edge_index, n, W, b))
    tau_hat = F if Wg is None else torch.relu(gcn_reference(X, edge_index, n, Wg, bg))
    A = dense_adjacency(edge_index, n)  # A[i, j] = 1 for an edge j → i
    diffs = (tau_hat[None, :, :] - tau_hat[:, None, :]).abs() ** p  # [i, j, k] = |τ̂_jk − τ̂_ik|^p
    agg = (A[:, :, None] * diffs).sum(1)
    if aggregation == "mean":
        agg = agg / A.sum(1, keepdim=True)
    tau = torch.tanh(agg)
    return (1 - dt * tau) * X + dt * tau * F


def gcn(m, seed):
    torch.manual_seed(seed)
    layer = GCNCoupling(m, m).double()
    with torch.no_grad():
        layer.bias.uniform_(-0.5, 0.5)
    return layer


@pytest.mark.parametrize("method", ["imex", "symplectic-euler"])
@pytest.mark.parametrize("alpha,gamma,dt", [(1.0, 1.0, 1.0), (0.5, 0.7, 1.0), (0.0, 1.0, 0.3)])
def test_graphcon_step_is_eq_7_4(method, alpha, gamma, dt):
    edge_index, n = small_graph()
    m = 5
    system = GraphCON(gcn(m, 1), m, alpha, gamma, edge_index=edge_index, num_nodes=n)
    X, Y = torch.randn(n, m, dtype=DT), torch.randn(n, m, dtype=DT)
    Y1, X1 = FIXED_SCHEMES[method].step(Field(system), 0.0, (Y, X), dt)
    sym = system.symbols()
    rY, rX = graphcon_reference(X, Y, edge_index, n, sym["W"], sym["F_θ.bias"], alpha, gamma, dt)
    assert (Y1 - rY).abs().max() <= 1e-6 and (X1 - rX).abs().max() <= 1e-6
    # the same through odelab.solve (fixed step, two layers)
    sol = odelab.solve(system, (Y, X), [0.0, dt, 2 * dt], method=method, dt=dt)
    rY2, rX2 = graphcon_reference(rX, rY, edge_index, n, sym["W"], sym["F_θ.bias"], alpha, gamma, dt)
    assert (sol["X"][:, 2] - rX2).abs().max() <= 1e-6 and (sol["Y"][:, 2] - rY2).abs().max() <= 1e-6


def test_graphcon_residual_inside_activation():
    edge_index, n = small_graph(seed=3)
    m = 4
    system = GraphCON(gcn(m, 2), m, 1.0, 1.0, residual=True, edge_index=edge_index, num_nodes=n).double()
    X, Y = torch.randn(n, m, dtype=DT), torch.randn(n, m, dtype=DT)
    Y1, X1 = FIXED_SCHEMES["imex"].step(Field(system), 0.0, (Y, X), 1.0)
    s = system.symbols()
    rY, rX = graphcon_reference(X, Y, edge_index, n, s["W"], s["F_θ.bias"], 1.0, 1.0, 1.0, s["R"], s["R.bias"])
    assert (X1 - rX).abs().max() <= 1e-6 and (Y1 - rY).abs().max() <= 1e-6


@pytest.mark.parametrize("method", ["euler", "imex"])
@pytest.mark.parametrize("p,aggregation", [(2.0, "mean"), (1.5, "mean"), (3.0, "sum")])
def test_g2_step_is_eq_8_4(method, p, aggregation):
    edge_index, n = small_graph(seed=4)
    m = 6
    system = GradientGating(gcn(m, 5), m, p, aggregation=aggregation, edge_index=edge_index, num_nodes=n)
    X = torch.randn(n, m, dtype=DT)
    (X1,) = FIXED_SCHEMES[method].step(Field(system), 0.0, (X,), 1.0)
    s = system.symbols()
    ref = g2_reference(X, edge_index, n, s["W"], s["F_θ.bias"], p, aggregation=aggregation)
    assert (X1 - ref).abs().max() <= 1e-6
    # the continuous field (8.9) itself
    (dX,) = system.derivative(0.0, (X,), None)
    assert (dX - (ref - X)).abs().max() <= 1e-6


def test_g2_separate_gate_coupling():
    edge_index, n = small_graph(seed=6)
    m = 3
    system = GradientGating(gcn(m, 7), m, 2.0, gate_coupling=gcn(m, 8), edge_index=edge_index, num_nodes=n)
    X = torch.randn(n, m, dtype=DT)
    (X1,) = FIXED_SCHEMES["euler"].step(Field(system), 0.0, (X,), 1.0)
    s = system.symbols()
    ref = g2_reference(X, edge_index, n, s["W"], s["F_θ.bias"], 2.0, Wg=s["Ŵ"], bg=s["F̂_θ̂.bias"])
    assert (X1 - ref).abs().max() <= 1e-6


def test_models_are_k_steps_of_the_equations():
    edge_index, n = small_graph(seed=9)
    torch.manual_seed(0)
    x = torch.randn(n, 7, dtype=DT)
    model = GraphCONModel(7, 4, 3, layers=3, alpha=0.5, gamma=0.8).double().eval()
    s = model.system.symbols()
    X = torch.relu(model.enc(x))
    Y = X
    for _ in range(3):
        Y, X = graphcon_reference(X, Y, edge_index, n, s["W"], s["F_θ.bias"], 0.5, 0.8, 1.0)
    assert (model(x, edge_index) - model.dec(X)).abs().max() <= 1e-6

    model = G2Model(7, 4, 3, layers=3, p=2.0).double().eval()
    s = model.system.symbols()
    X = torch.relu(model.enc(x))
    for _ in range(3):
        X = g2_reference(X, edge_index, n, s["W"], s["F_θ.bias"], 2.0)
    assert (model(x, edge_index) - model.dec(X)).abs().max() <= 1e-6


def test_models_train_and_dropout_placement():
    edge_index, n = small_graph(seed=2)
    x = torch.randn(n, 5)
    for model in (GraphCONModel(5, 8, 2, 4, dropout=0.5), G2Model(5, 8, 2, 4, dropout=0.5, input_dropout=0.2),
                  GCNModel(5, 8, 2, 4, dropout=0.3)):
        model.train()
        out = model(x, edge_index)
        out.square().sum().backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
        model.eval()
        assert torch.equal(model(x, edge_index), model(x, edge_index))
    # GraphCON applies dropout to X and Y after every step; G² only at the input and before the decoder
    assert GraphCONModel(5, 8, 2, 4, dropout=0.5).step_dropout == 0.5
    g2 = G2Model(5, 8, 2, 4, dropout=0.5)
    assert g2.step_dropout == 0.0 and g2.output_dropout == 0.5


@pytest.mark.parametrize("kind", ["graphcon", "g2"])
def test_dopri5_on_packed_state_with_stats(kind):
    edge_index, n = small_graph(seed=11)
    m = 4
    if kind == "graphcon":
        system = GraphCON(gcn(m, 3), m, 0.5, 1.0, activation="tanh", edge_index=edge_index, num_nodes=n)
    else:
        system = GradientGating(gcn(m, 3), m, 2.0, edge_index=edge_index, num_nodes=n)
    X = torch.rand(n, m, dtype=DT)
    y0 = tuple(system.pack(X) for _ in system.blocks)
    t = [0.0, 1.0, 2.0]
    sol = odelab.solve(system, y0, t, method="dopri5", rtol=1e-8, atol=1e-10)
    assert int(sol.stats["steps"][0]) > 0 and int(sol.stats["nfe"][0]) > int(sol.stats["steps"][0])
    assert bool(sol.success.all())
    fine = odelab.solve(system, y0, t, method="rk4", dt=0.01)
    x_end = system.unpack(sol["X"][0, -1])
    assert x_end.shape == (n, m)
    assert (x_end - system.unpack(fine["X"][0, -1])).abs().max() <= 1e-6
    # a node-layout state would give every node its own step size: refused with the fix named
    with pytest.raises(ValueError, match="pack"):
        odelab.solve(system, tuple(X for _ in system.blocks), t, method="dopri5")


def test_packed_batch_equals_node_layout():
    edge_index, n = small_graph(seed=12)
    m = 3
    system = GraphCON(gcn(m, 4), m, 0.3, 1.0, edge_index=edge_index, num_nodes=n)
    X = torch.randn(2, n, m, dtype=DT)
    Y = torch.randn(2, n, m, dtype=DT)
    assert [tuple(z.shape) for z in system.initial_state(2)] == [(2, n * m)] * 2
    packed = FIXED_SCHEMES["imex"].step(Field(system), 0.0, (system.pack(Y), system.pack(X)), 1.0)
    for b in range(2):
        nodes = FIXED_SCHEMES["imex"].step(Field(system), 0.0, (Y[b], X[b]), 1.0)
        for got, want in zip(packed, nodes):
            assert (system.unpack(got[b]) - want).abs().max() <= 1e-12


def test_gat_coupling_rows_are_attention_averages():
    """GAT with W = I and a = 0: uniform attention over N(i) ∪ {i}, i.e. the neighbourhood mean."""
    edge_index, n = small_graph(seed=13)
    layer = GATCoupling(3, 3).double()
    with torch.no_grad():
        layer.weight.copy_(torch.eye(3))
        layer.att_src.zero_()
        layer.att_dst.zero_()
    X = torch.randn(n, 3, dtype=DT)
    A = dense_adjacency(edge_index, n) + torch.eye(n, dtype=DT)
    assert (layer(X, edge_index) - (A / A.sum(1, keepdim=True)) @ X).abs().max() <= 1e-12


def test_pyg_gcnconv_is_a_drop_in_coupling():
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    edge_index, n = small_graph(seed=14)
    m = 4
    torch.manual_seed(0)
    conv = pyg_nn.GCNConv(m, m).double()
    system = GraphCON(conv, m, 0.5, 1.0, edge_index=edge_index, num_nodes=n)
    X, Y = torch.randn(n, m, dtype=DT), torch.randn(n, m, dtype=DT)
    Y1, X1 = FIXED_SCHEMES["imex"].step(Field(system), 0.0, (Y, X), 1.0)
    s = system.symbols()
    rY, rX = graphcon_reference(X, Y, edge_index, n, s["W"], conv.bias, 0.5, 1.0, 1.0)
    assert (X1 - rX).abs().max() <= 1e-6 and (Y1 - rY).abs().max() <= 1e-6
    model = G2Model(5, m, 2, 3, coupling="pyg-sage")
    assert model(torch.randn(n, 5), edge_index).shape == (n, 2)
    # the plain-torch GAT coupling computes what PyG's GATConv computes (same weights, 2 heads)
    ours, theirs = GATCoupling(m, 3, heads=2).double(), pyg_nn.GATConv(m, 3, heads=2).double()
    with torch.no_grad():
        theirs.lin.weight.copy_(ours.weight)
        theirs.att_src.copy_(ours.att_src)
        theirs.att_dst.copy_(ours.att_dst)
        theirs.bias.copy_(torch.randn(6))
        ours.bias.copy_(theirs.bias)
    assert (ours(X, edge_index) - theirs(X, edge_index)).abs().max() <= 1e-10


def test_errors_name_the_argument():
    edge_index, n = small_graph()
    with pytest.raises(ValueError, match="alpha"):
        GraphCON(GCNCoupling(2), 2, alpha=-1.0)
    with pytest.raises(ValueError, match="gamma"):
        GraphCON(GCNCoupling(2), 2, gamma=math.nan)
    with pytest.raises(ValueError, match="activation"):
        GraphCON(GCNCoupling(2), 2, activation="swish")
    with pytest.raises(ValueError, match="p"):
        GradientGating(GCNCoupling(2), 2, p=0.0)
    with pytest.raises(ValueError, match="aggregation"):
        GradientGating(GCNCoupling(2), 2, aggregation="max")
    with pytest.raises(ValueError, match="edge_index"):
        GraphCON(GCNCoupling(2), 2, edge_index=torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="coupling"):
        GraphCON(lambda x, e: x, 2)
    system = GraphCON(GCNCoupling(2), 2)
    with pytest.raises(ValueError, match="graph"):
        system.derivative(0.0, (torch.zeros(3, 2), torch.zeros(3, 2)), None)
    system.graph = edge_index
    assert system.num_nodes == n
    with pytest.raises(ValueError, match="state"):
        system.derivative(0.0, (torch.zeros(n + 1, 2), torch.zeros(n + 1, 2)), None)
    with pytest.raises(ValueError, match="layers"):
        GraphCONModel(3, 2, 2, layers=0)


def test_symbols_and_registration():
    import odelab.systems as systems

    assert systems.GraphCON is GraphCON and systems.GradientGating is GradientGating
    s = GraphCON(GCNCoupling(3), 3, 0.25, 2.0).symbols()
    assert float(s["α"]) == 0.25 and float(s["γ"]) == 2.0 and s["W"].shape == (3, 3)
    assert GraphCON.blocks == ("Y", "X") and GraphCON.velocity_position == ("Y", "X")
    g = GradientGating(GCNCoupling(3), 3, 1.5).symbols()
    assert float(g["p"]) == 1.5 and "W" in g


def test_g2_sparse_square_form_equals_edge_sums():
    edge_index, n = small_graph(seed=15)
    system = GradientGating(gcn(4, 9), 4, 2.0, edge_index=edge_index, num_nodes=n)
    X = torch.randn(n, 4, dtype=DT, requires_grad=True)
    fast = system.derivative(0.0, (X,), None)[0]
    (g_fast,) = torch.autograd.grad(fast.square().sum(), X)
    system.sparse_square = False
    slow = system.derivative(0.0, (X,), None)[0]
    (g_slow,) = torch.autograd.grad(slow.square().sum(), X)
    assert (fast - slow).abs().max() <= 1e-10 and (g_fast - g_slow).abs().max() <= 1e-9


@pytest.mark.parametrize("model_class", [GraphCONModel, G2Model])
def test_graph_models_take_every_derivative(model_class):
    """The GCN coupling's sparse product (a custom autograd Function) has a forward-mode rule, a vmap rule and a
    differentiable backward: forward-mode and ``torch.func.jvp`` tangents against central differences,
    ``torch.func.grad`` against reverse mode, ``torch.func.jacrev`` against ``torch.autograd.functional.jacobian``,
    and Hessian-vector products against central differences of the gradient. (Before: forward mode and every
    torch.func transform failed.)"""
    import torch.autograd.forward_ad as forward_ad
    from torch.func import functional_call, grad, jacrev, jvp

    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 2], [1, 2, 3, 4, 5, 0, 3, 5]])
    x, direction = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    model = model_class(3, 4, 2, 3).double()
    _, by_jvp = jvp(lambda x: model(x, edge_index), (x,), (direction,))  # first: its caches built inside the transform
    eps = 1e-6
    with torch.no_grad():
        reference = (model(x + eps * direction, edge_index) - model(x - eps * direction, edge_index)) / (2 * eps)
    with forward_ad.dual_level():
        tangent = forward_ad.unpack_dual(model(forward_ad.make_dual(x, direction), edge_index)).tangent
    assert torch.allclose(tangent, reference, rtol=1e-6, atol=1e-9)
    assert torch.allclose(by_jvp, reference, rtol=1e-6, atol=1e-9)
    params = {k: p.detach() for k, p in model.named_parameters()}
    by_func = grad(lambda p: functional_call(model, p, (x, edge_index)).square().sum())(params)
    by_autograd = torch.autograd.grad(model(x, edge_index).square().sum(), list(model.parameters()))
    for key, g in zip(params, by_autograd):
        assert torch.allclose(by_func[key], g, rtol=1e-12, atol=1e-14)
    jacobian = jacrev(lambda x: model(x, edge_index))(x)
    assert torch.allclose(jacobian, torch.autograd.functional.jacobian(lambda x: model(x, edge_index), x), atol=1e-13)
    ps = list(model.parameters())
    v = [torch.randn_like(p) for p in ps]
    first = torch.autograd.grad(model(x, edge_index).square().sum(), ps, create_graph=True)
    hvp = torch.autograd.grad(sum((g * vi).sum() for g, vi in zip(first, v)), ps)
    grads = []
    for sign in (1, -1):
        with torch.no_grad():
            for p, vi in zip(ps, v):
                p.add_(sign * eps * vi)
        grads.append(torch.autograd.grad(model(x, edge_index).square().sum(), ps))
        with torch.no_grad():
            for p, vi in zip(ps, v):
                p.sub_(sign * eps * vi)
    for h, a, b in zip(hvp, *grads):
        assert torch.allclose(h, (a - b) / (2 * eps), rtol=1e-5, atol=1e-8)
