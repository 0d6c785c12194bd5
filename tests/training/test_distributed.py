"""Data-parallel training: 2 CPU processes (gloo) end with the weights of 1 process on the same global batches."""
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import odelab.data.tasks
from odelab import cells
from odelab.cli import main
from odelab import SequenceRegressor, TrainConfig, fit

CONFIG = dict(epochs=2, lr=1e-2, batch_size=5, seed=3, eval_batch_size=4)  # batches of 5 rows: shards of 3 and 2


def tiny_data():
    g = torch.Generator().manual_seed(0)
    return {split: (torch.randn(n, 12, 1, generator=g), torch.randn(n, 12, 1, generator=g))
            for split, n in (("train", 11), ("valid", 6), ("test", 5))}  # 11 rows: the last batch has 1 row


def tiny_model():
    torch.manual_seed(1)
    model = SequenceRegressor(cells.LEM(1, 4), 4, 1)
    model.register_parameter("unused", torch.nn.Parameter(torch.zeros(3)))  # no gradient: stays None
    return model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fit_worker(rank: int, world: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    model = tiny_model()
    if rank == 1:  # a different start on rank 1: fit must broadcast rank 0's weights
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    result = fit(model, tiny_data(), TrainConfig(**CONFIG), progress=False)
    assert model.unused.grad is None and model.readout.weight.grad is not None
    torch.save({"state": model.state_dict(), "result": result}, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


def test_two_processes_train_the_same_weights_as_one(tmp_path):
    mp.spawn(_fit_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    single = tiny_model()
    expected = fit(single, tiny_data(), TrainConfig(**CONFIG), progress=False)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    moved = False
    for name, value in single.state_dict().items():
        for saved in ranks:
            assert torch.allclose(saved["state"][name], value, atol=1e-5, rtol=0), name
        moved |= not torch.allclose(value, tiny_model().state_dict()[name])
    assert moved  # training changed the weights
    for saved in ranks:
        result = saved["result"]
        assert result["world_size"] == 2 and result["best_epoch"] == expected["best_epoch"]
        assert abs(result["test_rmse"] - expected["test_rmse"]) < 1e-5
        for a, b in zip(result["history"]["valid_rmse"], expected["history"]["valid_rmse"]):
            assert abs(a - b) < 1e-5


def _cli_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    odelab.data.tasks.TASKS["fhn"].load = lambda seed: tiny_data()
    code = main(["fit", "fhn", "--model", "lem", "--hidden", "4", "--epochs", "1", "--batch-size", "5",
                 "--no-progress", "--out", out])
    assert code == 0


def test_cli_under_torchrun_environment_writes_once_from_rank_0(tmp_path, monkeypatch):
    mp.spawn(_cli_worker, args=(2, _free_port(), str(tmp_path / "ddp")), nprocs=2, join=True)
    assert not dist.is_initialized()
    monkeypatch.setattr(odelab.data.tasks.TASKS["fhn"], "load", lambda seed: tiny_data())
    assert main(["fit", "fhn", "--model", "lem", "--hidden", "4", "--epochs", "1", "--batch-size", "5",
                 "--no-progress", "--out", str(tmp_path / "one")]) == 0
    parallel = json.loads((tmp_path / "ddp" / "results.json").read_text())
    single = json.loads((tmp_path / "one" / "results.json").read_text())
    assert parallel["world_size"] == 2 and single["world_size"] == 1
    assert abs(parallel["test_rmse"] - single["test_rmse"]) < 1e-5
    a = torch.load(tmp_path / "ddp" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-5, rtol=0) for k in b)
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
