"""`benchmarks/bench_vllm_lora.py`: vLLM's CPU LoRA kernels, which it times, compute what the two GEMMs beside them
compute, so the bench compares like with like and fails when vLLM changes those kernels."""


def test_vllm_s_lora_kernels_add_the_adapter_s_product_as_the_two_gemms_do(load_benchmark):
    import torch

    bench = load_benchmark("bench_vllm_lora")
    gen = torch.Generator().manual_seed(0)
    slices = (64, 16, 16)
    x = torch.randn(12, 32, generator=gen).half()
    pairs = bench.adapter(slices, 32, 4, gen)
    base = torch.randn(12, sum(slices), generator=gen).half()
    through_vllm, through_gemms = base.clone(), base.clone()
    bench.lora_through_vllm(x, pairs, through_vllm, 2.0)
    bench.lora_through_gemms(x, pairs, through_gemms, 2.0)
    exact = base.double() + torch.cat([(x.double() @ a[0].double().T * 2.0) @ b[0].double().T for a, b in pairs], 1)
    assert (through_vllm.double() - base.double()).abs().max() > 0.1  # the adapter moved the output
    assert torch.allclose(through_vllm.double(), exact, atol=2e-2, rtol=2e-3)
    assert torch.allclose(through_gemms.double(), exact, atol=2e-2, rtol=2e-3)


def test_the_ranks_are_the_registered_lora_experiments_and_each_is_timed(load_benchmark):
    from precision_rl.tiny.shipped import SHIPPED_DIR

    bench = load_benchmark("bench_vllm_lora")
    ranks = bench.lora_ranks()
    assert ranks[1] == ["lora/grpo_token_tis"] and ranks[32] == ["lora/grpo_token_tis_rank32"]
    timings = bench.step_ms(str(SHIPPED_DIR), rank=2, tokens=8, repeats=1)
    assert set(timings) == {"layers", "vllm", "gemms"} and all(t > 0 for t in timings.values())

