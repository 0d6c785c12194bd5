"""Every preset of odelab.cells.PRESETS trains on FitzHugh--Nagumo through `odelab fit fhn --model NAME`."""
import json

import numpy as np
import pytest
from helpers import fresh_cache

import odelab.data.tasks
from odelab import cells
from odelab.cli import main
from odelab.data import fitzhugh_nagumo


@pytest.fixture(scope="module")
def short_fhn(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:  # the module's runs cache in a folder of their own, restored after
        patch.setenv("ODELAB_CACHE", fresh_cache(tmp_path_factory.mktemp("cache")))
        data = fitzhugh_nagumo(seed=1234, sizes=(("train", 4), ("valid", 2), ("test", 2)))
        yield {k: (x[:, :200].contiguous(), y[:, :200].contiguous()) for k, (x, y) in data.items()}  # 200 steps


@pytest.mark.parametrize("name", sorted(cells.PRESETS))
def test_preset_trains_on_fhn_through_the_cli(name, short_fhn, tmp_path, monkeypatch):
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed, **options: short_fhn)
    assert main(["fit", "fhn", "--model", name, "--epochs", "2", "--batch-size", "2", "--no-progress",
                 "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert np.isfinite(result["test_rmse"]) and len(result["history"]["train_rmse"]) == 2
    assert result["history"]["train_rmse"][0] != result["history"]["train_rmse"][1]  # the parameters moved
