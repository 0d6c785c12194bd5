"""Engine selection of Recurrent: the generic loop is the definition; fused kernels and CUDA graphs are derived
implementations that must give the same values and gradients, and refuse clearly where they do not apply."""
import pytest
import torch

import odelab
from odelab.models import Recurrent
from odelab.systems import System

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class Leaky(System):
    """A user's own field, dh/dt = tanh(W h + u) − h: no kernel is registered for it."""

    blocks, observable = ("h",), "h"

    def __init__(self, input_size=2, hidden_size=5):
        super().__init__()
        self.set_sizes(input_size, hidden_size)
        self.W = torch.nn.Parameter(torch.randn(hidden_size, hidden_size) / hidden_size**0.5)
        self.V = torch.nn.Parameter(torch.randn(hidden_size, input_size))

    def derivative(self, t, state, inp, *delayed):
        (h,) = state
        return (torch.tanh(h @ self.W.T + inp @ self.V.T) - h,)


def test_engine_is_validated():
    with pytest.raises(ValueError, match="engine"):
        odelab.cells.LEM(1, 3).engine = "turbo"
    with pytest.raises(ValueError, match="engine"):
        Recurrent(Leaky(), "euler", 1.0, engine="fast")


def test_user_system_falls_back_under_auto_and_refuses_fused():
    x = torch.randn(3, 6, 2)
    auto = Recurrent(Leaky(), "euler", 0.5)
    assert auto.kernel(x) is None  # no kernel: the generic loop runs
    h = torch.zeros(3, 5)
    for n in range(6):  # forward Euler of the field, written out
        h = h + 0.5 * (torch.tanh(h @ auto.system.W.T + x[:, n] @ auto.system.V.T) - h)
    assert torch.allclose(auto(x)[0][:, -1], h, atol=1e-6)
    fused = Recurrent(auto.system, "euler", 0.5, engine="fused")
    with pytest.raises(ValueError, match="no fused kernel for \\(Leaky, 'euler'\\)"):
        fused(x)


def test_a_subclass_is_not_fused():
    """A kernel applies to the registered class itself: a subclass may change the field."""

    class MyLEM(odelab.systems.LEM):
        pass

    cell = Recurrent(MyLEM(1, 3), "imex", 1.0)
    assert cell.kernel(torch.randn(2, 4, 1)) is None


def test_cuda_graph_engine_needs_cuda_tensors():
    cell = Recurrent(Leaky(), "euler", 1.0, engine="cuda-graph")
    with pytest.raises(ValueError, match="cuda-graph"):
        cell(torch.randn(2, 3, 2))


def test_float64_input_into_float32_weights_names_the_dtype():
    with pytest.raises(TypeError, match="float32.*float64"):
        odelab.cells.LEM(1, 3)(torch.randn(2, 4, 1, dtype=torch.float64))


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("make", [lambda: Recurrent(Leaky(), "rk4", 0.5), lambda: odelab.cells.LEM(2, 5, dt=0.5),
                                  lambda: odelab.cells.TauGRU(2, 5, tau=3.0)])
def test_cuda_graph_equals_generic(make):
    torch.manual_seed(0)
    generic = make().cuda()
    generic.engine = "generic"
    graphed = make().cuda()
    graphed.load_state_dict(generic.state_dict())
    graphed.engine = "cuda-graph"
    x = torch.randn(4, 30, 2, device="cuda")
    weights = torch.randn(4, 30, 5, device="cuda")
    for _ in range(2):  # the second call replays the captured graph
        out_g, _ = generic(x)
        out_c, _ = graphed(x)
        assert torch.allclose(out_g, out_c, atol=1e-6)
        grads_g = torch.autograd.grad((out_g * weights).mean(), list(generic.parameters()))
        grads_c = torch.autograd.grad((out_c * weights).mean(), list(graphed.parameters()))
        for a, b in zip(grads_g, grads_c):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
