"""Ctrl-C reports the last epoch whose checkpoint is on disk, wherever it lands."""
import pytest
import torch

import odelab.training.loop as loop
from odelab.models import SequenceRegressor, cells


@pytest.mark.parametrize("after_rename", [True, False])
def test_ctrl_c_during_the_checkpoint_save_reports_the_epoch_on_disk(tmp_path, monkeypatch, after_rename):
    real_save = loop.atomic_save
    calls = []

    def save_then_interrupt(payload, path):
        calls.append(payload["epoch"])
        if len(calls) == 2 and not after_rename:
            raise KeyboardInterrupt  # before the rename: the file still holds epoch 1
        real_save(payload, path)
        if len(calls) == 2:
            raise KeyboardInterrupt  # after the rename, before the loop records epoch 2

    monkeypatch.setattr(loop, "atomic_save", save_then_interrupt)
    torch.manual_seed(0)
    model = SequenceRegressor(cells.PRESETS["gru"](1, 3), 3, 1)
    data = {k: (torch.randn(4, 5, 1), torch.randn(4, 5, 1)) for k in ("train", "valid", "test")}
    with pytest.raises(loop.Interrupted) as stop:
        loop.fit(model, data, loop.TrainConfig(epochs=5, batch_size=2), out_dir=tmp_path, progress=False)
    on_disk = loop.load_checkpoint(tmp_path / "checkpoint.pt")["epoch"] + 1
    assert stop.value.epochs == on_disk == (2 if after_rename else 1)
