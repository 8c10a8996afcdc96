"""verl's FSDP training engine, extended to report the fp16 loss scale and the optimizer steps it skipped, and to add
the synthetic logit noise of a control run (``logit_noise``).

verl 0.9.1's FSDP engine builds a ``ShardedGradScaler`` when ``param_dtype`` is fp16
(``verl.workers.engine.fsdp.transformer_impl.FSDPEngine._build_fsdp_module``), and both it and the bf16/fp32 path skip
an optimizer step whose gradient norm is not finite (``FSDPEngine.optimizer_step``), but neither the scale nor the skips reach the logs. The engine
below adds, on the last mini-batch of every training step, ``precision/loss_scale`` (the scale after the step; 1
without a scaler) and ``precision/skipped_steps`` (optimizer steps skipped in this training step); the trainer
(``precision_rl.verl_ext.trainer``) turns the latter into the run's cumulative count.

verl 0.9.1's checkpoint leaves the scaler out (``FSDPEngine.save_checkpoint`` and ``load_checkpoint`` save and restore
the model, optimizer, scheduler and RNG through ``verl.utils.checkpoint.fsdp_checkpoint_manager.FSDPCheckpointManager``
only), so a resumed fp16 run would start again at the initial scale with a growth count of zero, and its loss scale,
and with it its fp16 gradients, would depend on where the run was interrupted. The engine below writes the scaler's
state beside each rank's checkpoint files and restores it on resume.

It is registered for NVIDIA GPUs (paper scale) under verl's vendor key, which verl's engine registry prefers over
its default CUDA engine (``verl.workers.engine.base.EngineRegistry.get_engine_cls``), and as the engine of the CPU
platform (tiny scale), where it also builds the scaler for the CPU and, on CPUs without matrix instructions for the run's 16-bit format,
computes that format's GEMMs as the GPU does at fp32 speed (``cpu.gemm``).
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys

import torch

from precision_rl.metrics import LOSS_SCALE, SKIPPED_STEPS

# verl 0.9.1 builds its fp16 scaler with this growth interval
# (verl.workers.engine.fsdp.transformer_impl.FSDPEngine._build_fsdp_module).
SCALER_GROWTH_INTERVAL = 400
SCALER_STATE_FILE = "precision_rl_scaler_rank{rank}.json"  # in verl's actor checkpoint folder, one per rank
_LAST_MINI_BATCH_KEY = "update_lr_scheduler"  # set by verl on the step's last mini-batch (verl.workers.engine_workers.TrainingWorker.train_mini_batch)


def engine_threads() -> int:
    """Return how many threads the CPU training engine computes on: every core this process may run on (verl's sync
    trainer never trains while vLLM generates)."""
    return len(os.sched_getaffinity(0))


def pin_torch_threads() -> int:
    """Set torch's intra-op threads to ``engine_threads()`` and return the count.

    Ray starts actors with one OpenMP thread, and transfer_queue 0.1.11 sets torch's thread count around each of
    its transfers and afterwards restores the count it saw when it was imported
    (``transfer_queue.utils.common.limit_pytorch_auto_parallel_threads``), which in a Ray actor is 1: the engine
    therefore sets the count again before every forward and backward pass. A fixed count also fixes the order of
    torch's parallel reductions, which a repeatable run needs.
    """
    threads = engine_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def precision_step_metrics(scaler, skipped: int) -> dict[str, list[float]]:
    """Return the loss-scale metrics of one training step: the scaler's current scale (1.0 without one) and the
    number of optimizer steps skipped during the step, each as a one-element list (verl's engines report
    per-micro-batch lists, which its worker gathers over data-parallel ranks and flattens, verl.workers.engine_workers.TrainingWorker.train_mini_batch)."""
    return {LOSS_SCALE: [float(scaler.get_scale()) if scaler is not None else 1.0], SKIPPED_STEPS: [float(skipped)]}


def scaler_state_path(folder: str, rank: int) -> str:
    """Return the path of rank ``rank``'s loss-scaler state in the checkpoint folder ``folder``."""
    return os.path.join(folder, SCALER_STATE_FILE.format(rank=rank))


def save_scaler_state(scaler, folder: str, rank: int) -> str:
    """Write ``scaler.state_dict()`` (scale, growth and backoff factors, growth interval, growth count) as JSON into
    ``folder``; return the file's path."""
    path = scaler_state_path(folder, rank)
    with open(path, "w") as fh:
        json.dump(scaler.state_dict(), fh)
    return path


def load_scaler_state(scaler, folder: str, rank: int) -> bool:
    """Restore ``scaler`` from the state ``save_scaler_state`` wrote into ``folder``; return False, leaving the scaler
    as built, when the folder has none (a checkpoint written before the state was saved). A file that is not such a
    state raises ValueError naming it."""
    path = scaler_state_path(folder, rank)
    if not os.path.isfile(path):
        return False
    try:
        with open(path) as fh:
            scaler.load_state_dict(json.load(fh))
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise ValueError(f"{path} is not a loss-scaler state ({type(err).__name__}: {err})") from None
    return True


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


@functools.cache
def engine_classes() -> dict[str, type]:
    """Return the engine classes (built on first use, since verl is imported lazily): ``"gpu"`` and ``"cpu"``."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    from precision_rl.verl_ext.logit_noise import add_trainer_noise, trainer_noise

    class PrecisionFSDPEngine(FSDPEngineWithLMHead):
        """verl's FSDP language-model engine that reports its loss scale and skipped optimizer steps."""

        _skipped_in_step = 0

        def optimizer_step(self):
            grad_norm = super().optimizer_step()
            # Both of verl's paths skip exactly the steps whose gradient norm is not finite.
            self._skipped_in_step += int(not math.isfinite(grad_norm))
            return grad_norm

        def train_batch(self, data: TensorDict, loss_function):
            outputs = super().train_batch(data, loss_function)
            if tu.get_non_tensor_data(data=data, key=_LAST_MINI_BATCH_KEY, default=False):
                if self.is_mp_src_rank_with_outputs():
                    outputs["metrics"].update(precision_step_metrics(self.scaler, self._skipped_in_step))
                self._skipped_in_step = 0
            return outputs

        def prepare_model_outputs(self, output, output_args, micro_batch, logits_processor_func):
            if (spec := trainer_noise()) is not None:
                if tu.get_non_tensor_data(data=micro_batch, key="use_fused_kernels", default=False):
                    raise RuntimeError("the synthetic logit noise needs the model's logits: turn off use_fused_kernels")
                packed = tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True)
                output.logits = add_trainer_noise(output.logits, micro_batch["input_ids"], spec, packed)
            return super().prepare_model_outputs(output, output_args, micro_batch, logits_processor_func)

        def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None, **kwargs):
            super().save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep, **kwargs)
            if self.scaler is not None and local_path is not None:
                save_scaler_state(self.scaler, local_path, _rank())

        def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=True, **kwargs):
            super().load_checkpoint(local_path, hdfs_path, del_local_after_load, **kwargs)
            if self.scaler is not None and local_path is not None and not load_scaler_state(self.scaler, local_path, _rank()):
                print(f"precision_rl: {local_path} holds no loss-scaler state; the fp16 loss scale restarts at "
                      f"{self.scaler.get_scale():g}", file=sys.stderr)

    class CPUFSDPEngine(PrecisionFSDPEngine):
        """The same engine on the CPU platform, computing on a pinned number of threads."""

        def forward_backward_batch(self, data: TensorDict, loss_function, forward_only=False):
            pin_torch_threads()
            return super().forward_backward_batch(data, loss_function, forward_only)

        def _build_fsdp_module(self, module):
            pin_torch_threads()
            from verl.utils.torch_dtypes import PrecisionType

            from precision_rl.formats import HALF_FORMAT_OF_DTYPE
            from precision_rl.verl_ext.cpu.features import gemm_mode
            from precision_rl.verl_ext.cpu.gemm import use_half_linears

            # The dtype verl resolves itself, read as verl reads it (verl 0.9.1
            # FSDPEngine._build_fsdp_module: mixed_precision.param_dtype, bf16 where unset).
            mixed = self.engine_config.mixed_precision or {}
            param_dtype = PrecisionType.to_dtype(mixed.get("param_dtype", "bf16"))
            fmt = HALF_FORMAT_OF_DTYPE.get(param_dtype)
            if fmt is not None and gemm_mode(fmt) == "emulated":
                use_half_linears(module, param_dtype)
            module = super()._build_fsdp_module(module)
            if self.scaler is not None:
                # verl builds the scaler for torch's default device "cuda"
                # (verl.workers.engine.fsdp.transformer_impl.FSDPEngine._build_fsdp_module), where a CPU
                # build of torch disables it: fp16 would then train without loss scaling.
                from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

                self.scaler = ShardedGradScaler(device="cpu", growth_interval=SCALER_GROWTH_INTERVAL)
            return module

    return {"gpu": PrecisionFSDPEngine, "cpu": CPUFSDPEngine}


def register_engines(cpu: bool) -> None:
    """Register the engine for the CPU platform (``cpu``) or for NVIDIA GPUs in verl's engine registry."""
    from verl.workers.engine.base import EngineRegistry

    classes = engine_classes()
    register = EngineRegistry.register
    if cpu:
        register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(classes["cpu"])
    else:
        register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cuda", vendor="nvidia")(classes["gpu"])
