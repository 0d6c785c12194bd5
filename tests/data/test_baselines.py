"""The trivial forecasts a model must beat, at any forecast horizon."""
import math

import pytest
import torch

from odelab.data.tasks import forecast_horizon, linear_extrapolation_rmse


@pytest.mark.parametrize("horizon", [1, 3, 7])
def test_linear_extrapolation_follows_the_line_through_the_last_two_samples_h_steps_ahead(horizon):
    t = torch.arange(40, dtype=torch.float64)
    series = torch.stack([torch.sin(0.3 * t), 0.01 * t ** 2]).unsqueeze(-1)  # (2, 40, 1)
    x, y = series[:, :-horizon], series[:, horizon:]
    assert forecast_horizon(x, y) == horizon
    errors = []
    for b in range(2):
        for n in range(1, x.shape[1]):  # the line through (n−1, s_{n−1}) and (n, s_n), read at n + H
            s = series[b, :, 0].tolist()
            errors.append((s[n] + horizon * (s[n] - s[n - 1]) - s[n + horizon]) ** 2)
    assert linear_extrapolation_rmse(x, y) == pytest.approx(math.sqrt(sum(errors) / len(errors)), rel=1e-12)
    # a quadratic's second differences are constant: one step ahead the error is exactly that constant, 0.02
    if horizon == 1:
        assert linear_extrapolation_rmse(x[1:], y[1:]) == pytest.approx(0.02, rel=1e-9)


def test_targets_of_another_series_are_read_as_one_step_ahead():
    x, y = torch.randn(3, 10, 1, generator=torch.Generator().manual_seed(0)), torch.zeros(3, 10, 1)
    assert forecast_horizon(x, y) == 1
