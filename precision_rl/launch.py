"""Plan and launch runs: one run = one experiment × precision arm × seed at one scale.

``plan_run`` derives everything a run needs (identity, directory, verl overrides, command) from the registry;
``execute_paper`` launches verl and records the run; tiny-scale runs go to ``precision_rl.tiny``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from precision_rl import REPO_ROOT, runs
from precision_rl.errors import UserError
from precision_rl.precision import PrecisionArm
from precision_rl.registry import ExperimentSpec
from precision_rl.scale import ScaleDecision
from precision_rl.verl_overrides import (
    FILE_LOGGER_ENV,
    RunContext,
    compose,
    config_name,
    data_files,
    shell_command,
    to_dataclasses,
    verl_command,
    verl_overrides,
)

DATA_DIR_ENV = "PRECISION_RL_DATA"
LOGGER_CHOICES = ("console", "file", "wandb", "tensorboard", "mlflow", "swanlab")


def data_root() -> Path:
    """Return the dataset root (``$PRECISION_RL_DATA`` or ``<repo>/data``)."""
    return Path(os.environ.get(DATA_DIR_ENV, REPO_ROOT / "data")).resolve()


@dataclass(frozen=True)
class RunOptions:
    """What the user asked for beyond the experiment: seed, resources, extra overrides, dry run, resume."""

    seed: int = 42
    dry_run: bool = False
    resume: bool = False
    gpus: int | None = None
    nnodes: int | None = None
    extra: tuple[str, ...] = ()
    loggers: tuple[str, ...] = ("console", "file")


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
    overrides: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def command(self) -> str:
        """Return the run's command as one copy-pasteable shell line."""
        return shell_command(self.argv, self.env)


def parse_loggers(text: str) -> tuple[str, ...]:
    """Return the logger list named by a comma-separated ``text``; ``file`` is always included."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in LOGGER_CHOICES]
    if bad:
        raise UserError(f"unknown logger {bad[0]!r}: choose from {', '.join(LOGGER_CHOICES)}")
    return names if "file" in names else names + ("file",)


def plan_run(spec: ExperimentSpec, arm: PrecisionArm, decision: ScaleDecision, options: RunOptions) -> RunPlan:
    """Return the plan of one run; with ``options.resume`` it continues the newest run of the same identity."""
    root = runs.runs_root()
    name = runs.run_name(spec.name, arm.label, options.seed)
    if options.resume:
        run_dir = runs.latest_run_dir(root, decision.scale, spec.name, arm.label, options.seed)
        if run_dir is None:
            raise UserError(f"RESUME=1 but there is no earlier run of {name} at scale {decision.scale} to resume")
        attempt = runs.next_attempt(run_dir)
    else:
        run_dir, attempt = runs.planned_run_dir(root, decision.scale, spec.name, arm.label, options.seed), 0
        if run_dir.exists():
            raise UserError(f"run directory {run_dir} already exists: refusing to overwrite an earlier run")
    plan = RunPlan(spec, arm, decision, options, name, run_dir, attempt, runs.metrics_path(run_dir, attempt))
    if decision.scale == "paper":
        ctx = RunContext(
            run_name=name, seed=options.seed, data_dir=data_root(), metrics_path=plan.metrics_path,
            checkpoint_dir=run_dir / "checkpoints",
            gpus_per_node=options.gpus or spec.resources.gpus_per_node,
            nnodes=options.nnodes or spec.resources.nnodes, loggers=options.loggers,
        )
        plan.overrides = verl_overrides(spec, arm, ctx) + list(options.extra)
        if options.resume:
            plan.overrides.append("trainer.resume_mode=auto")
        plan.argv = verl_command(spec, plan.overrides)
        plan.env = {FILE_LOGGER_ENV: str(plan.metrics_path)}
    return plan


def check_composes(plan: RunPlan) -> None:
    """Raise a UserError when verl 0.9.1 cannot compose or instantiate the plan's overrides."""
    try:
        to_dataclasses(compose(config_name(plan.spec), plan.overrides))
    except Exception as exc:  # noqa: BLE001 - Hydra and verl raise many types; all mean a bad override
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"verl rejects the overrides of {plan.name}: {first}") from None


def base_manifest(plan: RunPlan) -> dict:
    """Return the manifest of a new run (status ``running``), common to both scales."""
    spec = plan.spec
    train, val = data_files(spec, data_root())
    return {
        "run_name": plan.name,
        "experiment": spec.name,
        "spec_file": spec.path,
        "scale": plan.decision.scale,
        "scale_decision": {"requested": plan.decision.requested, "reason": plan.decision.reason},
        "algorithm": spec.algorithm,
        "precision": {"label": plan.arm.label, "train": plan.arm.train, "infer": plan.arm.infer},
        "seed": plan.options.seed,
        "spec": spec.raw,
        "command": plan.command,
        "argv": plan.argv,
        "verl_overrides": plan.overrides,
        "extra_overrides": list(plan.options.extra),
        "git": runs.git_state(),
        "versions": runs.package_versions(),
        "hardware": runs.hardware(),
        "datasets": runs.dataset_hashes([train, *val]),
        "created": runs.utc_stamp(),
        "status": "running",
        "attempts": [],
    }


def begin_attempt(plan: RunPlan) -> None:
    """Create the run directory (new runs) or check it (resumes) and record the attempt's start."""
    if plan.attempt == 0:
        runs.create_run_dir(plan.run_dir)
        doc = base_manifest(plan)
    else:
        doc = runs.read_manifest(plan.run_dir)
    doc["attempts"].append({"attempt": plan.attempt, "metrics": plan.metrics_path.name, "command": plan.command,
                            "started": runs.utc_stamp(), "status": "running"})
    doc["status"] = "running"
    runs.write_manifest(plan.run_dir, doc)


def finish_attempt(plan: RunPlan, status: str, exit_code: int | None) -> None:
    """Record the attempt's end, status and exit code in the manifest."""
    runs.update_attempt(plan.run_dir, plan.attempt, status=status, exit_status=exit_code, ended=runs.utc_stamp())


def _check_data(plan: RunPlan) -> None:
    train, val = data_files(plan.spec, data_root())
    missing = [p for p in [train, *val] if not p.is_file()]
    if missing:
        raise UserError(f"dataset file {missing[0]} is missing: build it with `make data` "
                        f"(or point {DATA_DIR_ENV} at a folder that has it)")


def execute_paper(plan: RunPlan) -> int:
    """Launch verl for ``plan``, tee its output into train.log, record the run; return verl's exit code."""
    _check_data(plan)
    check_composes(plan)
    begin_attempt(plan)
    env = dict(os.environ, **plan.env)
    log_path = plan.run_dir / runs.TRAIN_LOG
    print(f"run directory: {plan.run_dir}", file=sys.stderr)
    started = time.time()
    with open(log_path, "ab") as log:
        log.write(f"$ {plan.command}\n".encode())
        proc = subprocess.Popen([sys.executable, *plan.argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, cwd=plan.run_dir)
        try:
            for line in proc.stdout:
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
                log.write(line)
            code = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            proc.wait()
            finish_attempt(plan, "interrupted", None)
            raise
    finish_attempt(plan, "finished" if code == 0 else "failed", code)
    print(f"{plan.name}: exit {code} after {time.time() - started:.0f} s; logs in {plan.run_dir}", file=sys.stderr)
    return code


def execute(plan: RunPlan) -> int:
    """Run ``plan`` at its scale (or print it when ``dry_run``); return the exit code."""
    if plan.decision.scale == "tiny":
        try:
            from precision_rl.tiny.runner import run_tiny
        except ImportError:
            raise UserError("SCALE=tiny is not available yet: the tiny-scale trainer has not landed "
                            "(use SCALE=paper DRY_RUN=1 to print the paper-scale command)") from None
        return run_tiny(plan)
    if plan.options.dry_run:
        print(plan.command)
        return 0
    return execute_paper(plan)
