"""The fp16 loss scaler's state goes into verl's checkpoint and comes back on resume (verl 0.9.1 leaves it out)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

from precision_rl.verl_ext.engine import load_scaler_state, save_scaler_state, scaler_state_path


def _train(scaler: ShardedGradScaler, model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        scaler.scale(model(torch.ones(1, 4)).sum()).backward()
        scaler.step(optimizer)
        scaler.update()


def _setup() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


@pytest.fixture
def process_group():
    """A one-process gloo group: the sharded scaler all-reduces its overflow check, as verl's engine does per step."""
    assert not torch.distributed.is_initialized()
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def test_a_restored_scaler_goes_on_as_the_uninterrupted_one(process_group, tmp_path):
    """Three steps with a growth interval of 2: the scale has doubled once and the growth count is 1. A scaler built
    afresh and restored from the saved state has both, and grows at the same step as the original."""
    model, optimizer = _setup()
    original = ShardedGradScaler(device="cpu", init_scale=2.0**10, growth_interval=2)
    _train(original, model, optimizer, 3)
    assert original.state_dict()["scale"] == 2.0**11 and original.state_dict()["_growth_tracker"] == 1
    path = save_scaler_state(original, str(tmp_path), rank=0)
    assert path == scaler_state_path(str(tmp_path), 0)

    resumed = ShardedGradScaler(device="cpu", init_scale=2.0**10, growth_interval=2)
    assert load_scaler_state(resumed, str(tmp_path), rank=0)
    assert resumed.state_dict() == original.state_dict()
    _train(original, model, optimizer, 1)
    _train(resumed, model, optimizer, 1)
    assert resumed.get_scale() == original.get_scale() == 2.0**12


def test_a_checkpoint_without_the_state_leaves_the_scaler_as_built(tmp_path):
    scaler = ShardedGradScaler(device="cpu", growth_interval=400)
    before = scaler.state_dict()
    assert not load_scaler_state(scaler, str(tmp_path), rank=0)
    assert scaler.state_dict() == before


@pytest.mark.parametrize("text", ['{"scale": 65536.0, "_growth', '{"scale": 65536.0}', "[]"])
def test_a_corrupted_state_is_named_in_one_error(tmp_path, text):
    scaler = ShardedGradScaler(device="cpu", growth_interval=400)
    path = scaler_state_path(str(tmp_path), 0)
    with open(path, "w") as fh:
        fh.write(text)
    with pytest.raises(ValueError, match=f"^{path} is not a loss-scaler state"):
        load_scaler_state(scaler, str(tmp_path), rank=0)


def test_verl_still_leaves_the_scaler_out_of_its_checkpoint():
    """Why the engine saves the scaler itself: verl 0.9.1's FSDP engine builds a scaler for fp16 but neither its
    checkpoint methods nor its checkpoint manager touch it. When this fails, verl checkpoints the scaler: drop
    ``save_checkpoint``/``load_checkpoint`` from precision_rl.verl_ext.engine."""
    from verl.utils.checkpoint import fsdp_checkpoint_manager
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    assert "self.scaler =" in inspect.getsource(FSDPEngine._build_fsdp_module)
    for source in (inspect.getsource(FSDPEngine.save_checkpoint), inspect.getsource(FSDPEngine.load_checkpoint),
                   inspect.getsource(fsdp_checkpoint_manager)):
        assert "scaler" not in source
