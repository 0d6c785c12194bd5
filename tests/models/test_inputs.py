"""What a sequence model accepts: its input and initial state are checked against the model before any kernel
reads them as raw arrays (a state of another batch, width or dtype used to be read out of bounds by the fused
kernels: wrong values, or a crash), and ``torch.autocast`` leaves the fused kernels in the parameters' dtype."""
import pytest
import torch

import odelab
from helpers import fused_cpu_presets
from odelab.kernels.cpu import extension
from odelab.models.unicornn import UnICORNNStack

# presets with a fused CPU kernel: name -> model (input 2, hidden 5; UnICORNN's one layer)
MODELS = fused_cpu_presets(5)
_stack = MODELS["unicornn"]
MODELS["unicornn"] = lambda: _stack().layers[0]
needs_kernels = pytest.mark.skipif(not extension.available(), reason="the CPU kernels did not build here")


def states(model, batch, width=None, dtype=torch.float32):
    return tuple(torch.randn(batch, width or n, dtype=dtype) for n in model.system.block_sizes())


@needs_kernels
@pytest.mark.parametrize("engine", ["auto", "generic"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_state_that_does_not_fit_is_refused_by_name(name, engine):
    torch.manual_seed(0)
    model = MODELS[name]()
    model.engine = engine
    x = torch.randn(3, 7, 2)
    block = model.system.blocks[0]
    for state, error, message in [
        (states(model, 5), ValueError, r"expected shape \(3, 5\) \(x's batch.*got \(5, 5\)"),
        (states(model, 1), ValueError, r"expected shape \(3, 5\).*got \(1, 5\)"),
        (states(model, 3, width=8), ValueError, r"expected shape \(3, 5\).*got \(3, 8\)"),
        (states(model, 3, dtype=torch.float64), TypeError, "expected dtype torch.float32.*got torch.float64"),
    ]:
        with pytest.raises(error, match=rf"state\['{block}'\]: " + message):
            model(x, state)


@needs_kernels
@pytest.mark.parametrize("engine", ["auto", "generic"])
def test_input_without_steps_or_of_integers_is_refused(engine):
    model = MODELS["lem"]()
    model.engine = engine
    with pytest.raises(ValueError, match=r"x: expected at least one step, got shape \(3, 0, 2\)"):
        model(torch.randn(3, 0, 2))
    with pytest.raises(TypeError, match="x: expected a floating-point tensor, got torch.int64"):
        model(torch.ones(3, 4, 2, dtype=torch.long))


@pytest.mark.parametrize("dt", [0, -0.5, float("inf"), float("nan"), True, "0.1"])
def test_a_step_that_is_not_positive_and_finite_is_refused(dt):
    """An infinite step used to be taken (every state NaN after the first step); True was read as 1."""
    system = odelab.systems.LEM(1, 3)
    with pytest.raises(ValueError, match="dt: expected a positive finite number"):
        odelab.Recurrent(system, "imex", dt)
    with pytest.raises(ValueError, match="dt: expected a positive finite number"):
        odelab.cells.LEM(1, 3, dt=dt)
    with pytest.raises(ValueError, match="unfolds: expected a positive integer"):
        odelab.Recurrent(system, "imex", 0.5, unfolds=True)


@needs_kernels
@pytest.mark.parametrize("name", sorted(MODELS))
def test_an_empty_batch_gives_empty_outputs(name):
    model = MODELS[name]()
    model.engine = "fused"
    out, final = model(torch.randn(0, 6, 2))
    assert out.shape == (0, 6, model.hidden_size)
    assert [tuple(s.shape) for s in final] == [(0, n) for n in model.system.block_sizes()]


def test_the_cpu_kernels_refuse_arrays_they_would_misread():
    a = torch.zeros(4, 3)
    with pytest.raises(RuntimeError, match="argument 1 is a torch.float64 tensor"):
        extension.call("lem_forward", [a, a.double()])
    with pytest.raises(RuntimeError, match="argument 0 is a torch.float32 tensor \\(contiguous: False\\)"):
        extension.call("lem_forward", [a.t(), a])
    with pytest.raises(RuntimeError, match="float32 or float64 tensors, got torch.bfloat16"):
        extension.call("lem_forward", [a.bfloat16()])


@needs_kernels
@pytest.mark.parametrize("backward_inside", [False, True])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_autocast_leaves_the_fused_kernels_in_float32(name, backward_inside):
    """Under ``torch.autocast`` (bfloat16 on the CPU) a fused kernel computes in float32, the input encoding
    included: its outputs and gradients equal the generic float32 loop's (the definition) to float32 accuracy. A
    backward inside the autocast region (which torch advises against) runs the kernel's own backward in float32
    too; only the input encoding's backward, a torch product, follows autocast there: gradients to bfloat16
    accuracy."""
    torch.manual_seed(1)
    model = MODELS[name]()
    x = torch.randn(3, 9, 2, requires_grad=True)
    state = tuple(s.requires_grad_() for s in states(model, 3))

    def step(engine, autocast):
        model.engine = engine
        inputs = [x, *state, *model.parameters()]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out, final = model(x, state)
            loss = (out * torch.linspace(-1, 1, out.shape[-1])).sum() + sum(f.sum() for f in final)
            if backward_inside:
                return out, torch.autograd.grad(loss, inputs)
        return out, torch.autograd.grad(loss, inputs)

    out, grads = step("fused", True)
    ref, ref_grads = step("generic", False)
    assert out.dtype == torch.float32
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6)
    params = list(model.parameters())
    encoding = torch.autograd.grad(model.system.encode(x).sum(), params, allow_unused=True)
    follows_autocast = [True] + [False] * len(state) + [g is not None for g in encoding]  # x's gradient, too
    for g, r, lowered in zip(grads, ref_grads, follows_autocast):
        assert g.dtype == r.dtype
        scale = r.abs().max()
        assert (g - r).abs().max() <= (2e-2 * scale if backward_inside and lowered else 1e-4 * scale + 1e-6)
    low, _ = step("generic", True)  # the generic loop under autocast: its products in bfloat16, for contrast
    assert (low - ref).abs().max() > 10 * (out - ref).abs().max()


@needs_kernels
@pytest.mark.parametrize("reversible", [False, True])
def test_a_unicornn_stack_checks_states_and_keeps_float32_under_autocast(reversible):
    torch.manual_seed(2)
    stack = UnICORNNStack(2, 4, num_layers=2, dt=0.5, alpha=0.3, reversible=reversible)
    x = torch.randn(3, 8, 2)
    with pytest.raises(ValueError, match=r"state\['z'\]: expected shape \(3, 4\)"):
        stack(x, [(torch.zeros(5, 4), torch.zeros(5, 4))] * 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = stack(x)
    out.sum().backward()
    grad = stack.layers[0].system.weight_input.grad.clone()
    stack.zero_grad()
    stack.engine = "generic"
    ref, _ = stack(x)
    ref.sum().backward()
    assert out.dtype == torch.float32
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6)
    assert torch.allclose(grad, stack.layers[0].system.weight_input.grad, rtol=1e-4, atol=1e-5)


def test_kernels_and_solves_run_on_their_tensors_device(monkeypatch):
    """Triton launches (and CUDA graph captures) on the current CUDA device, not their tensors': a fused cell's
    forward and a solve enter ``on_device_of`` with x / y0, which makes that device current (CUDA only)."""
    import importlib

    from odelab.models import recurrent
    from odelab.solvers import device

    solve_module = importlib.import_module("odelab.solvers.solve")  # the module (the package exports the function)

    seen = []

    def record(value):
        seen.append(value)
        return device.on_device_of(value)

    monkeypatch.setattr(recurrent, "on_device_of", record)
    monkeypatch.setattr(solve_module, "on_device_of", record)
    x = torch.randn(2, 3, 2)
    MODELS["lem"]()(x)
    y0 = torch.ones(2, 2)
    odelab.solve(lambda t, y: -y, y0, torch.linspace(0, 1, 3), method="rk4", dt=0.5)
    assert seen[0] is x and seen[1] is y0
    assert isinstance(device.on_device_of({"y": y0}), type(device.on_device_of(None)))  # CPU: nothing to switch


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_device_of_makes_the_tensors_device_current():
    from odelab.solvers.device import on_device_of

    last = torch.cuda.device_count() - 1
    y = torch.ones(2, device=f"cuda:{last}")
    with torch.cuda.device(0), on_device_of((y,)):
        assert torch.cuda.current_device() == last


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_model_on_the_second_gpu():
    """A fused LEM on cuda:1 while cuda:0 is current gives the outputs and gradients it gives on cuda:0."""
    torch.manual_seed(0)
    model = odelab.cells.LEM(2, 40, dt=0.5)
    x = torch.randn(4, 30, 2)
    results = []
    for index in (0, 1):
        copy = odelab.cells.LEM(2, 40, dt=0.5).to(f"cuda:{index}")
        copy.load_state_dict(model.state_dict())
        with torch.cuda.device(0):
            out, _ = copy(x.to(f"cuda:{index}"))
            out.square().sum().backward()
        results.append([out.cpu(), *(p.grad.cpu() for p in copy.parameters())])
    for a, b in zip(*results):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
