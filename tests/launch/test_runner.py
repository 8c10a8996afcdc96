"""Launcher and command line: dry runs print and write nothing; real runs get a fresh, complete run directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from precision_rl import cli, paths
from precision_rl.config import scale
from precision_rl.config.registry import load_experiment
from precision_rl.config.scale import ScaleDecision
from precision_rl.launch import runner as launch
from precision_rl.launch import runs
from precision_rl.launch.supervise import failing_line
from precision_rl.tiny.shipped import SHIPPED_DIR

PAPER = ScaleDecision("paper", "paper", "test")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    return tmp_path


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_prints_one_command_and_writes_nothing(capsys, isolated):
    code, out, err = run_cli(capsys, "run", "sanity/grpo", "--precision", "fp16", "--scale", "paper", "--dry-run")
    assert code == 0 and out.count("\n") == 1
    assert "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16" in out
    assert "actor_rollout_ref.rollout.dtype=float16" in out
    assert "python -m precision_rl.verl_ext.main" in out and "VERL_FILE_LOGGER_PATH=" in out
    assert "VERL_PLATFORM" not in out and "ray_init.num_gpus" not in out
    assert "SCALE=paper -> paper" in err
    assert not (isolated / "runs").exists()


def test_extra_overrides_pass_through(capsys):
    code, out, _ = run_cli(capsys, "run", "sanity/grpo", "--precision", "bf16", "--scale", "paper", "--dry-run",
                           "--extra", "trainer.save_freq=50", "--", "trainer.val_before_train=false")
    assert code == 0 and "trainer.save_freq=50" in out and out.strip().endswith("trainer.val_before_train=false")


def test_panel_selection_follows_the_registry(capsys):
    code, out, _ = run_cli(capsys, "run", "sanity/*", "--panel", "fig3", "--scale", "paper", "--dry-run")
    lines = out.strip().splitlines()
    names = sorted(line.split("trainer.experiment_name=")[1].split()[0] for line in lines)
    assert names == ["sanity.grpo-bf16-s42", "sanity.grpo_seq_mis-bf16-s42", "sanity.grpo_token_tis-bf16-s42",
                     "sanity.gspo-bf16-s42", "sanity.pg_seq_is-fp16-s42"]


@pytest.mark.parametrize("argv,message", [
    (["run", "sanity/nope", "--scale", "paper", "--dry-run"], "unknown experiment 'sanity/nope'"),
    (["run", "sanity/grpo", "--precision", "fp8", "--scale", "paper", "--dry-run"], "unknown precision 'fp8'"),
    (["run", "sanity/grpo", "--precision", "fp32", "--scale", "paper", "--dry-run"], "has no precision arm 'fp32'"),
    (["run", "sanity/grpo", "--scale", "paper", "--dry-run", "--loggers", "stdout"], "unknown logger 'stdout'"),
    (["run", "sanity/grpo", "--scale", "paper", "--resume", "--dry-run"], "no earlier run"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err


def test_paper_scale_without_gpu_refuses(capsys, monkeypatch):
    monkeypatch.setattr(scale, "paper_scale_problem", lambda: "no CUDA GPU found")
    code, _, err = run_cli(capsys, "run", "sanity/grpo", "--precision", "fp16", "--scale", "paper")
    assert code == 2 and "SCALE=paper needs CUDA GPUs" in err


def test_auto_scale_decides_loudly(monkeypatch):
    monkeypatch.setattr(scale, "paper_scale_problem", lambda: "no CUDA GPU found")
    assert scale.resolve_scale("auto") == ScaleDecision("auto", "tiny", "no CUDA GPU found")
    monkeypatch.setattr(scale, "paper_scale_problem", lambda: None)
    assert scale.resolve_scale("auto").scale == "paper"
    with pytest.raises(Exception, match="unknown SCALE"):
        scale.resolve_scale("huge")


def _fake_verl(plan, body: str):
    """Point the plan at a stand-in for verl that writes one metrics line where verl's file logger would."""
    plan.argv = ["python", "-c", body]
    return plan


# What Ray would leave in a session's logs (the stand-ins run with the attempt's own RAY_TMPDIR).
RAY_SESSION_LOG = ("import os; d = os.path.join(os.environ['RAY_TMPDIR'], 'ray', 'session_1', 'logs'); "
                   "os.makedirs(d); open(os.path.join(d, 'worker-1.err'), 'w').write('EngineCore killed\\n'); ")
FAKE = ("import json, os, sys; p = os.environ['VERL_FILE_LOGGER_PATH']; "
        "open(p, 'w').write(json.dumps({'step': 1, 'data': {'critic/score/mean': 0.5}}) + '\\n'); "
        "print('step:1'); sys.exit(CODE)")


def _data_files(isolated, spec):
    for name, split in [(spec.data.train, "train")] + [(v, "test") for v in spec.data.val]:
        path = isolated / "data" / name / f"{split}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1")


def test_a_run_records_manifest_log_and_metrics(isolated):
    spec = load_experiment("sanity/grpo")
    _data_files(isolated, spec)
    plan = _fake_verl(launch.plan_run(spec, spec.arm("fp16"), PAPER, launch.RunOptions(seed=3)),
                      RAY_SESSION_LOG + FAKE.replace("CODE", "0"))
    assert launch.execute(plan) == 0
    run_dir = plan.run_dir
    assert not list(run_dir.glob("ray-logs-*")) and not plan.ray_temp_dir.exists()  # a finished run keeps none
    assert run_dir.parent == isolated / "runs" / "paper" / "sanity" / "grpo" / "fp16" and run_dir.name.startswith("s3-")
    manifest = runs.read_manifest(run_dir)
    assert manifest["status"] == "finished" and manifest["attempts"][0]["exit_status"] == 0
    assert manifest["precision"] == {"label": "fp16", "train": "fp16", "infer": "fp16",
                                     "rollout_quantization": None, "synthetic_logit_noise": None} and manifest["seed"] == 3
    assert manifest["run_name"] == "sanity.grpo-fp16-s3" and "git" in manifest and manifest["versions"]["verl"] == "0.9.1"
    assert any(o.endswith(str(run_dir / "metrics.jsonl")) for o in manifest["verl_overrides"])
    assert manifest["model_files"] is None and "matrix_flags" in manifest["hardware"]
    assert json.loads((run_dir / "metrics.jsonl").read_text())["step"] == 1
    assert "step:1" in (run_dir / "train.log").read_text()

    # The same second cannot give a second run the same directory, and a failed resume keeps the first file.
    again = _fake_verl(launch.plan_run(spec, spec.arm("fp16"), PAPER, launch.RunOptions(seed=3, resume=True)),
                       FAKE.replace("CODE", "1"))
    assert again.run_dir == run_dir and again.metrics_path.name == "metrics.attempt1.jsonl"
    assert "trainer.resume_mode=auto" in again.overrides
    assert launch.execute(again) == 1
    manifest = runs.read_manifest(run_dir)
    assert manifest["status"] == "failed" and [a["attempt"] for a in manifest["attempts"]] == [0, 1]
    assert runs.attempt_files(run_dir) == [run_dir / "metrics.jsonl", run_dir / "metrics.attempt1.jsonl"]


def test_an_existing_run_directory_is_never_reused(isolated, monkeypatch):
    spec = load_experiment("sanity/grpo")
    monkeypatch.setattr(runs, "utc_stamp", lambda now=None: "20260101T000000Z")
    plan = launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions())
    plan.run_dir.mkdir(parents=True)
    (plan.run_dir / "metrics.jsonl").write_text("keep\n")
    with pytest.raises(Exception, match="already exists"):
        launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions())
    assert (plan.run_dir / "metrics.jsonl").read_text() == "keep\n"


def test_missing_data_is_a_clear_error(isolated):
    spec = load_experiment("sanity/grpo")
    plan = launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions())
    with pytest.raises(Exception, match="dataset file .*sanity/train.parquet is missing: build it with `make data`"):
        launch.execute(plan)
    assert not plan.run_dir.exists()


TINY = ScaleDecision("tiny", "tiny", "test")


def test_tiny_dry_run_is_the_paper_command_plus_the_cpu_platform(capsys, isolated):
    code, out, err = run_cli(capsys, "run", "sanity/grpo", "--precision", "fp16", "--scale", "tiny", "--dry-run")
    assert code == 0 and out.count("\n") == 1 and "SCALE=tiny -> tiny" in err
    assert "VERL_PLATFORM=cpu" in out and "python -m precision_rl.verl_ext.main" in out
    assert "+ray_kwargs.ray_init.num_gpus=1" in out and "++actor_rollout_ref.model.override_config.attn_implementation=sdpa" in out
    assert not (isolated / "runs").exists()

    spec = load_experiment("sanity/grpo", "tiny")
    tiny = launch.plan_run(spec, spec.arm("fp16"), TINY, launch.RunOptions())
    paper = launch.plan_run(load_experiment("sanity/grpo"), spec.arm("fp16"), PAPER, launch.RunOptions())
    assert paper.platform_overrides == [] and tiny.platform_overrides
    assert tiny.overrides == tiny.profile_overrides + tiny.platform_overrides
    assert tiny.argv[:3] == paper.argv[:3] == ["python", "-m", "precision_rl.verl_ext.main"]
    # Apart from the platform, the tiny command sets every key the paper one does (its profile changes values and
    # may add some, e.g. a learning-rate schedule).
    keys = lambda overrides: {o.split("=", 1)[0] for o in overrides}  # noqa: E731
    assert keys(paper.profile_overrides) <= keys(tiny.profile_overrides)


def test_the_rollout_engine_keeps_the_kv_cache_its_steps_fill_and_a_quarter_more(isolated):
    from precision_rl.verl_ext.cpu import overrides as O
    from precision_rl.verl_ext.settings import ROLLOUT

    spec = load_experiment("sanity/grpo", "tiny")
    tokens = spec.hyper.max_prompt_length + spec.hyper.max_response_length
    assert tokens <= O.VLLM_CPU_BLOCK_TOKENS  # one block a sequence: 1,024 blocks a step, 1,280 kept
    key = f"++{ROLLOUT}.engine_kwargs.vllm.num_gpu_blocks_override"
    plan = launch.plan_run(spec, spec.arm("fp16"), TINY, launch.RunOptions())
    assert f"{key}=1280" in plan.platform_overrides
    assert O.kv_cache_blocks(129) == 2560 and O.kv_cache_blocks(1) == 1280
    assert not any(o.startswith(key) for o in O.cpu_platform_overrides(1, None))  # lengths unknown: vLLM's own size
    # what 1,280 blocks hold, in bytes, against VLLM_CPU_KVCACHE_SPACE: the cap saves memory in every 16-bit arm
    model = json.loads((SHIPPED_DIR / "config.json").read_text())
    per_token = 2 * model["num_hidden_layers"] * model["num_key_value_heads"] * \
        (model["hidden_size"] // model["num_attention_heads"]) * 2
    assert 1280 * O.VLLM_CPU_BLOCK_TOKENS * per_token < O.VLLM_CPU_KVCACHE_GIB * 2**30 / 3


FAIL = ("import sys; print('loading'); print('(TaskRunner pid=12) ValueError: the model is broken'); "
        "print('shutting down'); sys.exit(3)")
HANG = "import time; print('started', flush=True); time.sleep(600)"


def _paper_plan(isolated, **options):
    spec = load_experiment("sanity/grpo")
    _data_files(isolated, spec)
    return launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions(**options))


def test_a_failed_run_names_its_directory_and_the_failing_line_and_keeps_ray_s_logs(isolated, capsys):
    plan = _fake_verl(_paper_plan(isolated), RAY_SESSION_LOG + FAIL)
    assert launch.execute(plan) == 3
    kept, err = capsys.readouterr().err.strip().splitlines()[-2:]
    assert err == f"error: {plan.name} failed ({plan.run_dir}): ValueError: the model is broken"
    archive = plan.run_dir / "ray-logs-attempt0.tar.gz"
    assert kept == f"{plan.name}: Ray's logs of this attempt (every worker's output): {archive}"
    with tarfile.open(archive) as tar:
        assert tar.extractfile("session_1/logs/worker-1.err").read() == b"EngineCore killed\n"
    attempt = runs.read_manifest(plan.run_dir)["attempts"][0]
    assert attempt["status"] == "failed" and attempt["exit_status"] == 3 and attempt["ray_logs"] == archive.name
    assert not plan.ray_temp_dir.exists()


def test_the_watchdog_stops_a_run_without_progress(isolated, capsys):
    plan = _paper_plan(isolated, watchdog_s=2)
    _fake_verl(plan, _hang(plan))
    started = time.monotonic()
    assert launch.execute(plan) == 1
    assert time.monotonic() - started < 60
    attempt = runs.read_manifest(plan.run_dir)["attempts"][0]
    assert attempt["status"] == "failed" and attempt["reason"].startswith("watchdog: no new metrics line")
    assert _printed(plan.run_dir / "train.log", "started")


def _printed(log: Path, line: str) -> bool:
    """Return whether the stand-in printed ``line``; the log's first line is the command, which holds it too."""
    return line in log.read_text().splitlines()[1:]


def _hang(plan) -> str:
    """Return a hanging stand-in for verl whose command line names ``plan``'s run, unlike other tests' stand-ins."""
    return f"{HANG}  # {plan.run_dir}"


def _running(body: str) -> list[psutil.Process]:
    """Return the live processes whose command line holds ``body``."""
    return [p for p in psutil.process_iter(["cmdline"]) if body in " ".join(p.info["cmdline"] or [])]


def _verl_started(plan) -> bool:
    """Return whether the run's stand-in for verl is up (its attempt is recorded and its process exists)."""
    return (plan.run_dir / runs.MANIFEST).is_file() and bool(_running(_hang(plan)))


def test_an_interrupted_run_is_recorded_and_leaves_no_process(isolated, capsys):
    plan = _paper_plan(isolated)
    _fake_verl(plan, _hang(plan))

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    def interrupt_once_started():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _verl_started(plan):
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupt)
    watcher = threading.Thread(target=interrupt_once_started, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            launch.execute(plan)
    finally:
        watcher.join()
        signal.signal(signal.SIGALRM, previous)
    doc = runs.read_manifest(plan.run_dir)
    assert doc["status"] == "interrupted" and doc["attempts"][0]["status"] == "interrupted"
    assert not _running(_hang(plan))
    assert f"interrupted; RESUME=1 continues {plan.run_dir} from step 1" in capsys.readouterr().err


def test_an_interrupt_while_the_run_starts_is_recorded_and_leaves_no_process(isolated, monkeypatch):
    from precision_rl.launch import supervise

    plan = _paper_plan(isolated)
    _fake_verl(plan, _hang(plan))

    def interrupted_guardian(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(supervise, "_start_guardian", interrupted_guardian)
    with pytest.raises(KeyboardInterrupt):
        launch.execute(plan)
    doc = runs.read_manifest(plan.run_dir)
    assert doc["status"] == "interrupted" and doc["attempts"][0]["status"] == "interrupted"
    assert not _running(_hang(plan))


def test_an_interrupt_inside_verls_popen_after_the_fork_leaves_no_process(isolated, monkeypatch):
    plan = _paper_plan(isolated)
    _fake_verl(plan, _hang(plan))
    real_popen = subprocess.Popen

    def popen_interrupted_after_the_fork(argv, *args, **kwargs):
        if argv[1:] != plan.argv[1:]:
            return real_popen(argv, *args, **kwargs)
        real_popen(argv, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "Popen", popen_interrupted_after_the_fork)
    with pytest.raises(KeyboardInterrupt):
        launch.execute(plan)
    doc = runs.read_manifest(plan.run_dir)
    assert doc["status"] == "interrupted"
    assert not _running(_hang(plan))


def test_an_interrupt_before_the_output_reader_starts_is_recorded_and_leaves_no_process(isolated, monkeypatch):
    plan = _paper_plan(isolated)
    _fake_verl(plan, _hang(plan))

    from precision_rl.launch import supervise

    class InterruptedBeforeTheReaderStarts(threading.Thread):
        def start(self):
            if getattr(self._target, "__name__", "") == "copy_output":
                raise KeyboardInterrupt
            super().start()

    monkeypatch.setattr(supervise.threading, "Thread", InterruptedBeforeTheReaderStarts)
    with pytest.raises(KeyboardInterrupt):
        launch.execute(plan)
    assert runs.read_manifest(plan.run_dir)["status"] == "interrupted"
    assert not _running(_hang(plan))


def test_a_rollout_that_cannot_fit_is_refused_before_verl_starts(isolated):
    spec = load_experiment("sanity/grpo", "tiny")
    plan = launch.plan_run(spec, spec.arm("bf16"), TINY, launch.RunOptions(extra=(
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",)))
    with pytest.raises(Exception, match="rollout tensor parallel size 2 does not divide the 1 GPU"):
        launch.check_composes(plan)


# A stand-in for verl that leaves what a real run leaves outside its directory: a shared-memory segment and a file in
# its temp folder; then it hangs.
LEAVES = (RAY_SESSION_LOG + "import os, time; open(f'/dev/shm/prl-test-{os.getpid()}', 'w').write('x'); "
          "open(os.path.join(os.environ['TMPDIR'], 'leftover'), 'w').write('x'); print('started', flush=True); "
          "time.sleep(600)")
LAUNCHER = """
from precision_rl.launch import runner as launch
from precision_rl.config.registry import load_experiment
from precision_rl.config.scale import ScaleDecision
spec = load_experiment("sanity/grpo")
plan = launch.plan_run(spec, spec.arm("bf16"), ScaleDecision("paper", "paper", "test"), launch.RunOptions())
plan.argv = ["python", "-c", {body!r}]
launch.execute(plan)
"""


def _wait_for(predicate, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_a_killed_launcher_is_cleaned_up_by_its_guardian(isolated):
    """SIGKILL to the launcher: its guardian stops verl, removes the temp folder and shm, records the attempt."""
    _data_files(isolated, load_experiment("sanity/grpo"))
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER.format(body=LEAVES)], env=dict(os.environ),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    arm_dir = isolated / "runs" / "paper" / "sanity" / "grpo" / "bf16"
    started = lambda: any(_printed(p, "started") for p in arm_dir.glob("*/train.log"))  # noqa: E731
    try:
        assert _wait_for(started, 120), "the stand-in run did not start"
        run_dir = next(arm_dir.iterdir())
        verl = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[-1] == LEAVES]
        assert len(verl) == 1
        shm = f"/dev/shm/prl-test-{verl[0].pid}"
        temp = launch.ray_temp_dir(run_dir, 0)
        assert os.path.exists(shm) and (temp / "leftover").exists()
    finally:
        launcher.kill()
        launcher.wait()
    killed = lambda: runs.read_manifest(run_dir)["status"] == "killed"  # noqa: E731
    assert _wait_for(killed, 60), runs.read_manifest(run_dir)["attempts"]
    attempt = runs.read_manifest(run_dir)["attempts"][0]
    assert attempt["reason"].startswith("the launcher ended without cleaning up")
    assert not verl[0].is_running() and not os.path.exists(shm) and not temp.exists()
    with tarfile.open(run_dir / attempt["ray_logs"]) as tar:
        assert "session_1/logs/worker-1.err" in tar.getnames()


def test_resume_refuses_a_run_that_is_still_running(isolated):
    spec = load_experiment("sanity/grpo")
    plan = launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions())
    runs.create_run_dir(plan.run_dir)
    runs.write_manifest(plan.run_dir, {"status": "running", "attempts": [
        {"attempt": 0, "status": "running", "launcher": runs.launcher_record()}]})
    with pytest.raises(Exception, match="is still running"):
        launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions(resume=True))


def test_resume_goes_back_to_a_checkpoint_whose_step_was_logged(tmp_path, capsys):
    """A kill between verl's checkpoint of step S and its metrics line of step S: resume from an earlier one."""
    ckpt = tmp_path / "checkpoints"
    assert launch.resume_overrides(ckpt, None) == ["trainer.resume_mode=auto"]
    for step in (4, 6):
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("6")
    assert launch.resume_overrides(ckpt, 6) == ["trainer.resume_mode=auto"]
    assert launch.resume_overrides(ckpt, 5) == ["trainer.resume_mode=resume_path",
                                                f"trainer.resume_from_path={ckpt / 'global_step_4'}"]
    assert launch.resume_overrides(ckpt, 3) == ["trainer.resume_mode=disable"]
    assert f"note: RESUME=1 continues {tmp_path} from step 1 (" in capsys.readouterr().err


def test_the_interrupt_message_says_from_which_step_a_resume_continues(tmp_path):
    """The line printed on Ctrl-C names the step RESUME=1 starts at, and why when a checkpoint is passed over."""
    ckpt = tmp_path / "checkpoints"
    assert launch.resume_point(ckpt, None).describe(tmp_path) == f"RESUME=1 continues {tmp_path} from step 1"
    for step in (4, 6):
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("6")
    assert launch.resume_point(ckpt, 6).describe(tmp_path) == f"RESUME=1 continues {tmp_path} from step 7"
    assert launch.resume_point(ckpt, 5).describe(tmp_path) == (
        f"RESUME=1 continues {tmp_path} from step 5 (verl saved global_step_6 before it logged step 6, which has no "
        "metrics line: the resume goes back to global_step_4)")
    assert launch.resume_point(ckpt, 3).describe(tmp_path) == (
        f"RESUME=1 continues {tmp_path} from step 1 (verl saved global_step_6 before it logged step 6, which has no "
        "metrics line: no earlier checkpoint is kept)")


def test_verl_still_checkpoints_a_step_before_it_logs_it():
    """``launch.resume_overrides`` steps back over a checkpoint whose metrics line a kill prevented; that is needed
    only while verl's trainer saves before it logs (verl.trainer.ppo.v1.trainer_base.PPOTrainer.fit)."""
    import inspect

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    fit = inspect.getsource(PPOTrainer.fit)
    assert fit.index("self._save_checkpoint()") < fit.index("self.logger.log(data=metrics")


def test_a_checkpoint_saved_by_loader_workers_resumes_with_as_many(tmp_path):
    """A run started before the CPU platform turned the loader's worker processes off resumes with its 8 workers."""
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    ckpt = tmp_path / "checkpoints"
    for step, workers in ((4, 0), (6, 3)):
        folder = ckpt / f"global_step_{step}"
        (folder / "actor").mkdir(parents=True)
        loader = StatefulDataLoader(list(range(32)), batch_size=4, num_workers=workers)
        it = iter(loader)
        next(it)
        torch.save(loader.state_dict(), folder / "data.pt")
        del it
    (ckpt / "latest_checkpointed_iteration.txt").write_text("6")
    assert launch.resume_overrides(ckpt, 6) == ["trainer.resume_mode=auto", "data.dataloader_num_workers=3"]
    assert launch.resume_overrides(ckpt, 5) == ["trainer.resume_mode=resume_path",
                                                f"trainer.resume_from_path={ckpt / 'global_step_4'}"]
    in_process = StatefulDataLoader(list(range(32)), batch_size=4, num_workers=0)
    in_process.load_state_dict(torch.load(ckpt / "global_step_6" / "data.pt", weights_only=False))
    with pytest.raises(AssertionError, match="_num_yielded"):  # why the override is needed (torchdata, lazily)
        next(iter(in_process))


def test_a_damaged_loader_state_is_one_clear_error(tmp_path):
    folder = tmp_path / "global_step_2"
    folder.mkdir()
    (folder / "data.pt").write_bytes(b"not a torch file")
    from precision_rl.errors import UserError

    with pytest.raises(UserError, match="cannot read the data-loader state to resume from"):
        launch.dataloader_workers_override(folder)


def test_a_failed_engine_start_names_its_root_cause_not_only_vllm_s_pointer_to_it():
    output = [  # vLLM 0.32's output when its engine core process dies during start-up, inside verl's Ray actors
        "(pid=812) INFO engine core starting",
        "(EngineCore_DP0 pid=901) Traceback (most recent call last):",
        "(EngineCore_DP0 pid=901) torch.OutOfMemoryError: cannot allocate 512 MiB for the KV cache",
        "(AgentLoopWorker pid=812) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore_DP0': 1}",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    ]
    assert failing_line(output) == ("torch.OutOfMemoryError: cannot allocate 512 MiB for the KV cache (then: "
                                    "RuntimeError: Engine core initialization failed. See root cause above. "
                                    "Failed core proc(s): {'EngineCore_DP0': 1})")
    assert failing_line(output[-2:]) == output[-1]  # no line above the pointer: the last error, as for any failure
    worker_died = [  # a worker process of the engine core dies first: the core points up too, before the front end
        "(EngineCore_DP0 pid=901) ERROR [multiproc_executor.py] WorkerProc failed to start.",
        "(EngineCore_DP0 pid=901) Traceback (most recent call last):",
        "(EngineCore_DP0 pid=901) OSError: [Errno 98] Address already in use",
        "(EngineCore_DP0 pid=901) ERROR [core.py] Exception: WorkerProc initialization failed due to an "
        "exception in a background process. See stack trace for root cause.",
        *output[3:],
    ]
    assert failing_line(worker_died) == ("OSError: [Errno 98] Address already in use (then: ERROR [core.py] "
                                         "Exception: WorkerProc initialization failed due to an exception in a "
                                         "background process. See stack trace for root cause.)")
    assert failing_line(["ValueError: the model is broken", "done"]) == "ValueError: the model is broken"


def test_cleanup_keeps_a_live_named_semaphore_of_another_run():
    """A spawn-context lock (as vLLM hands its engine processes) lives in /dev/shm under glibc's sem.<name> while its
    creator maps it under a temporary name: a run ending beside it must not remove it."""
    import multiprocessing

    from precision_rl.launch.supervise import SHM_DIR, remove_new_shm

    before = {p.name for p in SHM_DIR.iterdir()}
    lock = multiprocessing.get_context("spawn").Lock()
    name = "sem." + lock._semlock.name.lstrip("/")
    assert (SHM_DIR / name).exists()
    assert name not in remove_new_shm(before)
    assert (SHM_DIR / name).exists()
    del lock


def test_cleanup_removes_only_the_new_shm_entries_no_live_process_holds(tmp_path):
    """An entry held open by a descriptor or by a mapping survives; an entry nobody holds is removed."""
    import mmap
    import uuid

    from precision_rl.launch.supervise import SHM_DIR, remove_new_shm

    before = {p.name for p in SHM_DIR.iterdir()}
    tag = uuid.uuid4().hex[:8]
    opened, mapped, orphan = (SHM_DIR / f"precision-rl-test-{kind}-{tag}" for kind in ("open", "mapped", "orphan"))
    for path in (opened, mapped, orphan):
        path.write_bytes(b"\0" * mmap.PAGESIZE)
    holder = subprocess.Popen(  # another process, as a neighbouring run's engine would be
        [sys.executable, "-c", "import mmap, sys, time; f = open(sys.argv[1], 'rb'); g = open(sys.argv[2], 'r+b'); "
         "m = mmap.mmap(g.fileno(), 0); g.close(); print('ready', flush=True); time.sleep(60)",
         str(opened), str(mapped)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        removed = remove_new_shm(before)
        assert orphan.name in removed and not orphan.exists()
        assert opened.name not in removed and opened.exists()
        assert mapped.name not in removed and mapped.exists()
    finally:
        holder.kill()
        holder.wait()
        for path in (opened, mapped, orphan):
            path.unlink(missing_ok=True)


def test_an_fp4_rollout_on_a_layer_its_block_does_not_divide_is_refused_before_launch_naming_the_layer(tmp_path):
    from precision_rl.config.precision import parse_arm
    from precision_rl.errors import UserError

    fp4, fp8 = parse_arm("train_fp16-infer_fp4_e2m1"), parse_arm("train_fp16-infer_fp8_e4m3")
    launch.check_rollout_widths(fp4, SHIPPED_DIR)  # the shipped model's widths are multiples of 32
    config = json.loads((SHIPPED_DIR / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "intermediate_size": 70}))
    with pytest.raises(UserError, match=r"fp4_e2m1 quantizes in blocks of 32 .* 70-wide input of down_proj") as err:
        launch.check_rollout_widths(fp4, tmp_path)
    assert "\n" not in str(err.value)
    launch.check_rollout_widths(fp8, tmp_path)  # FP8's 128-wide blocks may end short: no refusal
    launch.check_rollout_widths(parse_arm("fp16"), tmp_path)


def test_an_orphaned_segment_is_reported_and_a_held_one_is_not(tmp_path):
    import uuid

    from precision_rl.launch.supervise import SHM_DIR, orphaned_shm

    before = {p.name for p in SHM_DIR.iterdir()}
    orphan = SHM_DIR / f"precision-rl-test-orphan-{uuid.uuid4().hex[:8]}"
    orphan.write_bytes(b"\0")
    try:
        with open(orphan, "rb"):
            assert orphan.name not in orphaned_shm(before)  # held open by this process
        assert orphan.name in orphaned_shm(before)
    finally:
        orphan.unlink(missing_ok=True)
