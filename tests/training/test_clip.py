"""Gradient clipping with the norm accumulated in float64 (float32 squares of ~1e19 overflow)."""
import math

import pytest
import torch
from torch import nn

from odelab.training.loop import clip_gradient_norm


def _parameters(*grads):
    out = []
    for g in grads:
        p = nn.Parameter(torch.zeros_like(g))
        p.grad = g.clone()
        out.append(p)
    return out


def test_huge_float32_gradients_are_scaled_not_zeroed():
    # 3e19 and 4e19: joint norm 5e19 is finite in float32, but 3e19**2 is not.
    params = _parameters(torch.tensor([3e19], dtype=torch.float32), torch.tensor([[4e19]], dtype=torch.float32))
    assert not math.isfinite(float(torch.tensor(3e19, dtype=torch.float32) ** 2))
    norm = clip_gradient_norm(params, 1.0)
    assert math.isclose(norm, 5e19, rel_tol=1e-6)
    assert math.isclose(params[0].grad.item(), 0.6, rel_tol=1e-5)
    assert math.isclose(params[1].grad.item(), 0.8, rel_tol=1e-5)


def test_matches_the_closed_form_and_leaves_small_gradients_alone():
    g1, g2 = torch.randn(5, 3), torch.randn(7)
    expected = math.sqrt(float((g1.double() ** 2).sum() + (g2.double() ** 2).sum()))
    params = _parameters(g1, g2)
    norm = clip_gradient_norm(params, 10 * expected)
    assert math.isclose(norm, expected, rel_tol=1e-12)
    assert torch.equal(params[0].grad, g1) and torch.equal(params[1].grad, g2)
    params = _parameters(g1, g2)
    clip_gradient_norm(params, 0.5)
    clipped = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
    assert math.isclose(clipped, 0.5, rel_tol=1e-5)


def test_infinite_gradients_report_an_infinite_norm_and_are_left_for_the_caller():
    params = _parameters(torch.tensor([float("inf"), 1.0]))
    assert clip_gradient_norm(params, 1.0) == math.inf
    assert clip_gradient_norm(_parameters(), 1.0) == 0.0


def _regression_data():
    g = torch.Generator().manual_seed(0)
    return {split: (torch.randn(n, 4, 2, generator=g), torch.randn(n, 4, 1, generator=g))
            for split, n in (("train", 8), ("valid", 4), ("test", 4))}


class _Poisoned(nn.Module):
    """A linear map whose weight gradient is NaN in the backward passes listed in ``poisoned``."""

    def __init__(self, poisoned):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(2, 1)
        self.calls, self.poisoned = 0, set(poisoned)
        self.linear.weight.register_hook(self._hook)

    def _hook(self, grad):
        self.calls += 1
        return grad * math.nan if self.calls in self.poisoned else grad

    def forward(self, x):
        return self.linear(x)


def test_fit_skips_a_step_with_a_nan_gradient_and_stops_after_many(capsys):
    from odelab import TrainConfig, fit
    from odelab.training.loop import MAX_SKIPPED_IN_A_ROW, NonFiniteLoss

    config = TrainConfig(epochs=3, lr=1e-2, batch_size=4, clip=1.0, seed=1)
    model = _Poisoned({2})  # the second of 6 steps
    result = fit(model, _regression_data(), config, progress=False)
    assert result["history"]["skipped_steps"] == 1
    from odelab.training.results import _print_skipped

    _print_skipped(result)
    assert "1 optimiser step skipped for a non-finite gradient norm" in capsys.readouterr().out
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # the same run without the poisoned step: the skipped step is the only difference, so the weights differ
    clean = _Poisoned(set())
    fit(clean, _regression_data(), config, progress=False)
    assert not torch.equal(clean.linear.weight, model.linear.weight)

    always = _Poisoned(set(range(1, 100)))
    with pytest.raises(NonFiniteLoss, match=f"{MAX_SKIPPED_IN_A_ROW} steps in a row"):
        fit(always, _regression_data(), TrainConfig(epochs=20, lr=1e-2, batch_size=4, clip=1.0), progress=False)
