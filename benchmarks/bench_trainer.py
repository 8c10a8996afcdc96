"""Where the tiny training engine's time goes (`make bench-trainer`; not a test): one micro-batch of the instrument
through the shipped model as the CPU training engine computes it, in each arm's format, forward only (the old
log-probabilities) and forward with backward (the update).

The engine's numerics are reproduced: the model in the arm's format (FSDP's mixed precision ``param_dtype``) under
autocast to it, verl's own log-probability and entropy functions, torch's deterministic algorithms (the
instrument's ``fsdp_config.full_determinism``), its linear layers on the emulated 16-bit GEMM where this CPU has no
matrix instructions for the format (``verl_ext.cpu.gemm.use_half_linears``, as ``verl_ext.engine``'s CPU engine
installs it), torch on every core of the process (``engine.pin_torch_threads``). FSDP itself (its hooks and the casts
of its flat parameters and gradients) is left out. The micro-batch has the instrument's rows and is padded to the longest
sequence a micro-batch of the published calibrated run holds (median over its steps of the logged
``prompt_length/max + response_length/max``), as verl 0.9.1 pads a micro-batch to its longest sequence when
remove-padding is off (``FSDPEngine.prepare_model_inputs``, ``torch.nested.to_padded_tensor``); so the FLOPs counted
here are an upper bound on a micro-batch's.

Per arm and pass it prints the wall time of a micro-batch (median of repeats), torch's profiler split of that time
(GEMMs, attention, format conversions, everything else), the GEMMs' own FLOP rate and share of this CPU's fp32 peak
(``analysis.phase_rates``), and the micro-batches of a step times that wall time beside the phase's median time in
the published calibrated runs of the arm on this CPU kind: what is left is verl's handling of the micro-batches.
Writes ``results/bench/trainer-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from precision_rl import metrics as M
from precision_rl.analysis import phase_rates
from precision_rl.analysis.logs import load_run_dir
from precision_rl.config.registry import INSTRUMENT_EXPERIMENT as EXPERIMENT
from precision_rl.config.registry import load_experiment
from precision_rl.console import render_table
from precision_rl.fileio import atomic_write_json
from precision_rl.formats import HALF_DTYPES
from precision_rl.launch import runs
from precision_rl.launch.eta import cpu_label
from precision_rl.paths import BENCH_DIR, REPO_ROOT, logs_root
from precision_rl.tiny.shipped import SHIPPED_DIR
from precision_rl.verl_ext.cpu.features import gemm_mode
from precision_rl.verl_ext.cpu.gemm import use_half_linears
from precision_rl.verl_ext.engine import pin_torch_threads

ARMS = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
PASSES = {phase_rates.OLD_LOG_PROB: False, phase_rates.UPDATE: True}  # phase -> with backward
# torch profiler op names by what they compute (self CPU time; any other op counts as "other").
OP_CLASSES = {
    "GEMM": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::mkldnn_linear", "aten::_addmm_activation"),
    "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                  "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    "conversion": ("aten::_to_copy", "aten::copy_", "aten::to"),
}


def published_runs(arm: str) -> list[Path]:
    """Return the published calibrated run directories of ``arm`` of the instrument's experiment."""
    root = logs_root() / "tiny" / EXPERIMENT / arm
    return sorted(p.parent for p in root.glob(f"*/{runs.MANIFEST}")) if root.is_dir() else []


def step_values(run_dir: Path) -> list[dict]:
    """Return the logged metrics of each training step of a run (step >= 1, every attempt merged), in step order."""
    logged = load_run_dir(run_dir)
    steps: dict[int, dict] = {}
    for step, name, value in zip(logged.steps, logged.names, logged.values, strict=True):
        if step >= 1:
            steps.setdefault(step, {})[name] = value
    return [steps[s] for s in sorted(steps)]


def padded_length() -> int:
    """Return the longest sequence a micro-batch of the published FP16 calibrated runs holds, as the median over
    their steps of ``prompt_length/max + response_length/max``."""
    lengths = [v["prompt_length/max"] + v["response_length/max"] for run in published_runs("fp16")
               for v in step_values(run) if "prompt_length/max" in v and "response_length/max" in v]
    if not lengths:
        raise SystemExit("bench-trainer: no published calibrated sanity/grpo FP16 run under results/logs to read "
                         "the micro-batch length from")
    return int(statistics.median(lengths))


def phase_seconds(arm: str, phase: str) -> float | None:
    """Return the median time of ``phase`` over the steps of the published calibrated runs of ``arm`` made on this
    CPU kind (None where none was)."""
    here = runs.hardware()["cpu_id"]
    values = [v[M.TIMING_PREFIX + phase] for run in published_runs(arm)
              if (runs.read_manifest(run).get("hardware") or {}).get("cpu_id") == here
              for v in step_values(run) if M.TIMING_PREFIX + phase in v]
    return statistics.median(values) if values else None


def build_model(dtype: torch.dtype) -> tuple[torch.nn.Module, str]:
    """Return the shipped model in ``dtype`` with the training engine's GEMMs, and the GEMM mode used."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(SHIPPED_DIR, dtype=torch.float32,
                                                 attn_implementation="sdpa").to(dtype)
    mode = "fp32"
    if dtype in HALF_DTYPES.values():
        fmt = next(name for name, d in HALF_DTYPES.items() if d == dtype)
        mode = gemm_mode(fmt)
        if mode == "emulated":
            use_half_linears(model, dtype)
    return model, mode


def micro_batch(rows: int, length: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Return a right-padded micro-batch of ``rows`` sequences of ``length`` positions, their lengths drawn uniformly
    between half and all of ``length`` and the padding masked (the model computes every position either way)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (rows, length), generator=gen)
    real = torch.randint(length // 2, length + 1, (rows,), generator=gen)
    mask = (torch.arange(length)[None, :] < real[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask, "position_ids": torch.arange(length).expand(rows, -1)}


def one_pass(model: torch.nn.Module, batch: dict[str, torch.Tensor], backward: bool) -> None:
    """Run one micro-batch as verl 0.9.1's engine does (``FSDPEngine.forward_step``): the model under autocast to the
    arm's format (none in fp32), the log-probabilities of the next tokens by ``verl.utils.torch_functional
    .logprobs_from_logits``; forward only with their entropy (``entropy_from_logits``: the old log-probabilities), or
    with a backward pass of their masked mean (the update, whose entropy coefficient is 0)."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    dtype = next(model.parameters()).dtype
    autocast = torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32)
    with torch.set_grad_enabled(backward), autocast:
        logits = model(**batch, use_cache=False).logits[:, :-1]
        taken = logprobs_from_logits(logits, batch["input_ids"][:, 1:])
        mask = batch["attention_mask"][:, 1:].to(taken.dtype)
        if backward:
            (-(taken * mask).sum() / mask.sum()).backward()
            model.zero_grad(set_to_none=True)
        else:
            entropy_from_logits(logits)


def measure(arm: str, rows: int, length: int, repeats: int) -> list[dict]:
    """Return one record per pass of ``arm``: wall time per micro-batch, its profile split and the GEMM rate."""
    torch.manual_seed(0)
    model, mode = build_model(ARMS[arm])
    batch = micro_batch(rows, length, model.config.vocab_size)
    weights = phase_rates.matmul_weights(model.config.to_dict())
    peak = phase_rates.cpu_peak()
    micro_batches = micro_batches_per_step()
    out = []
    for phase, backward in PASSES.items():
        one_pass(model, batch, backward)
        walls = []
        for _ in range(repeats):
            start = time.perf_counter()
            one_pass(model, batch, backward)
            walls.append(time.perf_counter() - start)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            one_pass(model, batch, backward)
        split = dict.fromkeys([*OP_CLASSES, "other"], 0.0)
        for event in prof.key_averages():
            kind = next((k for k, names in OP_CLASSES.items() if event.key in names), "other")
            split[kind] += event.self_cpu_time_total / 1e6
        profiled = sum(split.values())
        wall = statistics.median(walls)
        gemm_s = wall * split["GEMM"] / profiled
        flops = phase_rates.PASSES[phase] * weights * rows * length
        verl_s = phase_seconds(arm, phase)
        out.append({
            "arm": arm, "gemm_mode": mode, "phase": phase, "rows": rows, "length": length,
            "wall_s": wall, "share": {k: v / profiled for k, v in split.items()},
            "gemm_gflop": flops / 1e9, "gemm_gflop_per_s": flops / gemm_s / 1e9 if gemm_s else None,
            "gemm_share_of_peak": flops / gemm_s / peak[0] if gemm_s and peak else None,
            "micro_batches_per_step": micro_batches, "model_s_per_step": wall * micro_batches,
            "published_phase_s": verl_s})
    return out


def micro_batches_per_step() -> int:
    """Return how many micro-batches each of a step's trainer phases runs: its sequences over the micro-batch."""
    hyper = load_experiment(EXPERIMENT, "tiny").hyper
    return hyper.train_batch_size * hyper.rollout_n // hyper.ppo_micro_batch_size_per_gpu


def main(argv: list[str] | None = None) -> int:
    """Measure every arm, print the table, write the JSON record; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per pass (median reported)")
    args = parser.parse_args(argv)
    threads = pin_torch_threads()
    torch.use_deterministic_algorithms(True)  # the instrument's engines run with fsdp_config.full_determinism
    rows = load_experiment(EXPERIMENT, "tiny").hyper.ppo_micro_batch_size_per_gpu
    length = padded_length()
    records = [r for arm in args.arms for r in measure(arm, rows, length, args.repeats)]
    machine = runs.hardware()
    peak = phase_rates.cpu_peak()
    print(f"CPU: {cpu_label(machine)}, torch on {threads} threads; fp32 peak "
          f"{f'{peak[0] / 1e9:.0f} GFLOP/s ({peak[1]})' if peak else 'unknown'}; micro-batch {rows} x {length}")
    table = [[r["arm"], r["gemm_mode"], r["phase"], f"{1000 * r['wall_s']:.0f}",
              " / ".join(f"{100 * r['share'][k]:.0f}" for k in [*OP_CLASSES, "other"]),
              f"{r['gemm_gflop_per_s']:.0f}" if r["gemm_gflop_per_s"] else "-",
              f"{100 * r['gemm_share_of_peak']:.0f} %" if r["gemm_share_of_peak"] else "-",
              f"{r['model_s_per_step']:.1f}", f"{r['published_phase_s']:.1f}" if r["published_phase_s"] else "-"]
             for r in records]
    print(render_table(table, ["arm", "16-bit GEMM", "phase", "ms per micro-batch",
                               "% GEMM / attention / conversion / other", "GEMM GFLOP/s", "GEMM of peak",
                               f"model s per step (x{records[0]['micro_batches_per_step']})",
                               "published phase s (this CPU kind)"]))
    path = atomic_write_json(BENCH_DIR / f"trainer-{runs.utc_stamp()}.json",
                             {"hardware": machine, "threads": threads, "peak": peak, "records": records})
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
