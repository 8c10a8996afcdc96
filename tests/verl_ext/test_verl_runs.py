"""Real verl runs at tiny scale: verl 0.9.1's trainer on the CPU platform, launched by ``python -m precision_rl run``
exactly as ``make sanity-fp16`` launches it, with the project's extensions.

The runs use the shipped tiny model and a small generated problem set; verl's custom-reward hook loads
``parity_reward.py`` (a reward with a spread in every group, whatever the model answers). Each run is 2 steps of a
shrunken profile. ``make test`` runs the GRPO pair (FP16, and BF16 with the emulated bf16 GEMM) side by side, and
later FP16 GRPO once more, SIGKILLed after step 1 and resumed: the rerun must log the same metrics and generate the
same samples as the first run. The pair is the regression gate: it must stay in the band of the committed 2-step runs of
its configuration (``results/reference/``), and repeat them exactly where its numerics are theirs. One run per other
algorithm family, and every registered arm, run in ``make test-grid``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
import torch

from precision_rl import cli, paths
from precision_rl import metrics as M
from precision_rl.analysis import checks
from precision_rl.analysis.logs import load_committed_tables, load_run_dir, load_runs, run_dirs_under
from precision_rl.analysis.publish import publish_runs
from precision_rl.launch import runs
from precision_rl.launch.overrides import ROLLOUT
from precision_rl.launch.supervise import SHM_DIR, orphaned_shm
from precision_rl.paths import REPO_ROOT
from precision_rl.tiny import heldout
from precision_rl.tiny.shipped import SHIPPED_DIR
from precision_rl.verl_ext.engine import scaler_state_path
from precision_rl.verl_ext.rollout import STOP_KEY
from precision_rl.verl_ext.settings import GEMM_ENV

pytestmark = [pytest.mark.slow, pytest.mark.verl_runs]

REWARD = Path(__file__).with_name("parity_reward.py")
REWARD_LOG_ENV = "PRECISION_RL_TEST_REWARD_LOG"
# The shipped model writes the first 16 tokens of an arithmetic trace almost surely at T=1, so a group's samples
# would be identical and GRPO's advantages (and DAPO's kept groups) zero; T=2 (vLLM's largest) spreads them.
TEMPERATURE = 2.0
SMALL = [
    "trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.val_before_train=false", "trainer.save_freq=2",
    "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8", "data.max_response_length=16",
    "actor_rollout_ref.rollout.val_kwargs.n=1", f"reward.custom_reward_function.path={REWARD}",
    "reward.custom_reward_function.name=compute_score", f"actor_rollout_ref.rollout.temperature={TEMPERATURE}",
]
# Characters that are a token of the tiny tokenizer and occur in no other token (it splits digits one by one): the
# tiny model writes arithmetic, so a stop list of them ends most responses early, always on their last character.
STOP_CHARS = "13579"
STOP = [f"++{ROLLOUT}.custom.{STOP_KEY}=[" + ",".join(f'"{c}"' for c in STOP_CHARS) + "]"]
# DAPO's overlong shaping must fit the shrunken response length; one family samples with stop strings.
# The evaluation-only experiments are verl's validation before training, which SMALL turns off for the others.
EXTRA = {"dense14b/dapo": ["++reward.reward_kwargs.max_resp_len=16", "++reward.reward_kwargs.overlong_buffer_cfg.len=4"],
         "sanity/pg_seq_mis": STOP, "eval/inference_precision_8k": ["trainer.val_before_train=true"],
         "eval/inference_precision_32k": ["trainer.val_before_train=true"]}
REQUIRED = [M.REWARD, M.RESPONSE_LENGTH, M.GRAD_NORM, M.ENTROPY, "actor/pg_loss", M.PROBS_DIFF_ABS_MAX,
            M.PROBS_DIFF_ABS_MEAN, "training/rollout_probs_diff_std", M.TOKEN_KL_K1, M.TOKEN_KL_K3, M.PROBS_DIFF_MAX,
            M.PROBS_DIFF_MIN, M.LOSS_SCALE, M.SKIPPED_STEPS, M.STEP_TIME,
            *(M.TIMING_PREFIX + phase for phase in ("gen", "old_log_prob", "update_actor"))]
# One run per code path of the extensions: the clipped-ratio losses with the fp16 scaler and without (in `make test`),
# the bypass mode of the PG algorithms with stop strings, DAPO's reward manager and group filter, LoRA with token TIS
# (in `make test-grid`, with GSPO and the other registered arms). Each costs ~2 min on 2 cores, nearly all of it the
# start of verl's and vLLM's processes, one process after another, so `make test` starts its runs in concurrent groups
# of at most three (each run holds ~6 GiB).
GRID = pytest.mark.grid
FAMILIES = [pytest.param(e, a, marks=marks, id=f"{e}-{a}") for e, a, marks in (
    ("sanity/grpo", "fp16", ()), ("sanity/grpo", "bf16", ()), ("sanity/pg_seq_mis", "bf16", GRID),
    ("dense14b/dapo", "bf16", GRID), ("lora/grpo_token_tis", "bf16", GRID))]
SAVE_EVERY_STEP = "trainer.save_freq=1"
# Run once in its group and again in another, SIGKILLed once step 1 is logged and resumed with RESUME=1: the merged
# steps of its two attempts must repeat the first run's in every metric but timings.
REPEATED = ("sanity/grpo", "fp16")
RERUN = (*REPEATED, "rerun")  # the rerun, as a member of a group
# Each group starts at the same moment, as `make sanity-fp16 & make sanity-bf16` would: all must finish, sharing
# nothing. The rerun starts first in its group, so that its kill and its resumed start-up come as early as they can.
CONCURRENT = [[("sanity/grpo", "fp16"), ("sanity/grpo", "bf16"), ("ladder/grpo", "train_fp16-infer_fp8_e4m3")],
              [RERUN, ("ladder/synthetic_s2", "fp16"), ("ladder/synthetic_s2_control", "fp16")],
              [("dense14b/dapo", "bf16"), ("lora/grpo_token_tis", "bf16")]]
# The GRPO pair and the rerun compute with bf16 GEMMs emulated (both engines), whatever this CPU has.
GROUP_ENV = {GEMM_ENV["bf16"]: "emulated"}
# `PRECISION_RL_WRITE_REFERENCE=1 pytest -m slow -k regression_gate tests/verl_ext/test_verl_runs.py` replaces the
# committed 2-step reference runs of this machine's numerics (runs.numerics_key) with this machine's, and keeps those of
# other CPU kinds (after a change meant to move the numbers, a new profile, or a CPU kind with no reference yet).
WRITE_REFERENCE_ENV = "PRECISION_RL_WRITE_REFERENCE"
GATED = [("sanity/grpo", "fp16"), ("sanity/grpo", "bf16")]


def _rollouts(home: Path, experiment: str, arm: str, attempt: str) -> Path:
    return home / "rollouts" / f"{experiment.replace('/', '.')}-{arm}-{attempt}"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """Project roots with the tiny data sets seeded (generated problems; the model is the shipped one)."""
    from precision_rl.data.recipes import Recipe, dataset_file, write_dataset
    from precision_rl.data.sources import Problem
    from precision_rl.tiny import data as tiny_data
    from precision_rl.tiny.problems import make_problems

    root = tmp_path_factory.mktemp("verl_runs")
    problems = [Problem(p.question, p.answer) for p in make_problems(16, seed=9)]
    for name, split, rows in ((tiny_data.TRAIN_RECIPE, "train", problems[:12]),
                              (tiny_data.VAL_RECIPE, "test", problems[12:])):
        write_dataset(Recipe(name, "test set", split, tiny_data.TEMPLATE), rows, {"test": True}, root / "data")
    train = dataset_file(root / "data", tiny_data.TRAIN_RECIPE, "train", tiny_data.TEMPLATE)
    (train.parent / tiny_data.STAMP_FILE).write_text(json.dumps(tiny_data.dataset_stamp()))
    return root


@pytest.fixture(scope="module")
def verl_run(home):
    """Return a function that runs (experiment, arm) once per module and returns its run directory."""
    done: dict[tuple[str, str], Path] = {}
    patch = pytest.MonkeyPatch()
    patch.setenv(paths.CACHE_ENV, str(home / "cache"))
    patch.setenv(paths.DATA_ENV, str(home / "data"))
    patch.setenv(paths.RUNS_ENV, str(home / "runs"))

    def run(experiment: str, arm: str, *more: str) -> Path:
        """Return the run directory of (experiment, arm), running it (with its group) where not yet run."""
        for group in CONCURRENT:
            if (experiment, arm) in group and (experiment, arm) not in done:
                done.update(_run_concurrently(home, group))
        if (experiment, arm) not in done:
            patch.setenv(REWARD_LOG_ENV, str(_reward_log(home, experiment, arm, "first")))
            shm_before = {p.name for p in SHM_DIR.iterdir()}
            argv = ["run", experiment, "--scale", "tiny", "--precision", arm, "--watchdog", "600", "--",
                    *SMALL, *EXTRA.get(experiment, []), *more]
            assert cli.main(argv) == 0
            run_dir = runs.latest_run_dir(home / "runs", "tiny", experiment, arm, 42)
            _assert_nothing_left(run_dir, shm_before)
            done[(experiment, arm)] = run_dir
        return done[(experiment, arm)]

    def rerun() -> Path:
        """Return the run directory of REPEATED's rerun (killed after step 1 and resumed), running its group where not
        yet run."""
        if RERUN not in done:
            done.update(_run_concurrently(home, next(g for g in CONCURRENT if RERUN in g)))
        return done[RERUN]

    run.rerun = rerun
    yield run
    patch.undo()


def _launch(home: Path, experiment: str, arm: str, *more: str, seed: int = 42,
            env: dict[str, str] | None = None, attempt: str = "first") -> subprocess.Popen:
    """Start ``python -m precision_rl run`` for one arm in a process of its own (as `make` does), its output going to
    ``_output(home, experiment, arm, attempt)`` (a pipe nobody reads while the test waits on another run would fill
    and stop it)."""
    argv = [sys.executable, "-m", "precision_rl", "run", experiment, "--scale", "tiny", "--precision", arm,
            "--seed", str(seed), "--watchdog", "600", "--", *SMALL, *EXTRA.get(experiment, []), *more]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **(env or {}),
               **{REWARD_LOG_ENV: str(_reward_log(home, experiment, arm, attempt))})
    with open(_output(home, experiment, arm, attempt), "wb") as output:
        return subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)


def _reward_log(home: Path, experiment: str, arm: str, attempt: str) -> Path:
    """Return the file parity_reward.py logs a run's responses to."""
    return home / f"reward-{experiment.replace('/', '.')}-{arm}-{attempt}.jsonl"


def _output(home: Path, experiment: str, arm: str, attempt: str) -> Path:
    """Return the file a launcher's console output goes to."""
    return home / f"launcher-{experiment.replace('/', '.')}-{arm}-{attempt}.log"


def _tail(path: Path) -> str:
    return path.read_bytes()[-3000:].decode(errors="replace")


def _run_concurrently(home: Path, group: list[tuple[str, ...]]) -> dict[tuple[str, ...], Path]:
    """Run ``group``'s members at the same time (RERUN first, killed after step 1 and resumed while the others run);
    return their run directories once every one has finished and cleaned up."""
    shm_before = {p.name for p in SHM_DIR.iterdir()}
    arms = [m for m in group if m != RERUN]
    earlier = {arm: set(runs.arm_dir(home / "runs", "tiny", *arm).glob("s42-*")) for arm in arms}
    procs: dict[tuple[str, ...], subprocess.Popen] = {}
    dirs: dict[tuple[str, ...], Path] = {}
    try:
        rerun = _launch_rerun(home, *REPEATED, env=GROUP_ENV) if RERUN in group else None
        if rerun:
            procs[RERUN] = rerun[0]
        for arm in arms:
            procs[arm] = _launch(home, *arm, f"trainer.rollout_data_dir={_rollouts(home, *arm, 'first')}",
                                 env=GROUP_ENV if arm in GATED else None)
        if rerun:
            dirs[RERUN] = _kill_then_resume(home, *REPEATED, env=GROUP_ENV, launched=rerun)
        for arm in arms:
            procs[arm].wait(timeout=1800)
    except BaseException:
        _stop(procs.values())
        raise
    for arm in arms:
        assert procs[arm].returncode == 0, \
            f"{arm} failed beside {len(group) - 1} other run(s):\n{_tail(_output(home, *arm, 'first'))}"
        dirs[arm], = set(runs.arm_dir(home / "runs", "tiny", *arm).glob("s42-*")) - earlier[arm]
    for run_dir in dirs.values():
        _assert_nothing_left(run_dir, shm_before)
    return dirs


def _stop(launchers) -> None:
    """Stop ``launchers`` still running as Ctrl-C would (each cleans up its run), killing any that does not end."""
    for launcher in launchers:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
    for launcher in launchers:
        try:
            launcher.wait(timeout=60)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()


def _rerun_overrides(home: Path, experiment: str, arm: str) -> list[str]:
    """Return the rerun's overrides beyond SMALL: a checkpoint every step, its samples dumped apart."""
    return [SAVE_EVERY_STEP, f"trainer.rollout_data_dir={_rollouts(home, experiment, arm, 'rerun')}"]


def _launch_rerun(home: Path, experiment: str, arm: str, env: dict[str, str]) -> tuple[subprocess.Popen, set[Path]]:
    """Start (experiment, arm) again; return its launcher and the run directories of that name made before it."""
    earlier = set(runs.arm_dir(home / "runs", "tiny", experiment, arm).glob("s42-*"))
    return _launch(home, experiment, arm, *_rerun_overrides(home, experiment, arm), env=env, attempt="rerun"), earlier


def _kill_then_resume(home: Path, experiment: str, arm: str, env: dict[str, str],
                      launched: tuple[subprocess.Popen, set[Path]]) -> Path:
    """SIGKILL the rerun ``launched`` by _launch_rerun once step 1 is logged and dumped, check what the guardian and
    the readers do, resume; return its run directory. The caller checks, once its whole group has ended, that no
    shared-memory segment outlived the attempts (a neighbour ending at the moment of a check would show its own)."""
    arm_dir = runs.arm_dir(home / "runs", "tiny", experiment, arm)
    launcher, earlier = launched
    dump = _rollouts(home, experiment, arm, "rerun")
    more = _rerun_overrides(home, experiment, arm)
    samples_per_step = int(_override("data.train_batch_size")) * int(_override("actor_rollout_ref.rollout.n"))

    def step_one_done() -> Path | None:
        """verl dumps a step's samples in a thread of its own: wait for the whole file as well as the log line."""
        dumped = dump / "1.jsonl"
        if not dumped.exists() or dumped.read_text().count("\n") < samples_per_step:
            return None
        return next((p.parent for p in arm_dir.glob("s42-*/metrics.jsonl")
                     if p.parent not in earlier and p.read_text().count("\n") >= 1), None)

    deadline = time.monotonic() + 900
    while not step_one_done() and launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if launcher.poll() is not None:
        pytest.fail(f"the rerun ended by itself (exit {launcher.returncode}) before its kill:\n"
                    f"{_tail(_output(home, experiment, arm, 'rerun'))}")
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    run_dir = step_one_done()
    assert run_dir, "the run did not log and dump a step before the kill"
    deadline = time.monotonic() + 120
    while runs.read_manifest(run_dir)["status"] != "killed" and time.monotonic() < deadline:
        time.sleep(1)
    assert [a["status"] for a in runs.read_manifest(run_dir)["attempts"]] == ["killed"]
    _assert_no_process_left(run_dir)
    with open(run_dir / "metrics.jsonl", "a") as fh:  # what a kill in the middle of a write leaves
        fh.write('{"step": 2, "data": {"' + M.REWARD[:10])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_run_dir(run_dir)
    assert any("truncated" in str(w.message) for w in caught)
    argv = ["run", experiment, "--scale", "tiny", "--precision", arm, "--resume", "--watchdog", "600", "--",
            *SMALL, *EXTRA.get(experiment, []), *more]
    patch = pytest.MonkeyPatch()
    for name, value in {**env, REWARD_LOG_ENV: str(_reward_log(home, experiment, arm, "rerun"))}.items():
        patch.setenv(name, value)
    try:
        assert cli.main(argv) == 0
    finally:
        patch.undo()
    _assert_no_process_left(run_dir)
    return run_dir


def _override(key: str) -> str:
    """Return the value SMALL gives ``key``."""
    return next(o.split("=", 1)[1] for o in SMALL if o.split("=", 1)[0] == key)


@pytest.fixture(scope="module")
def rerun(verl_run):
    """Return the run directories of REPEATED's first run and of its rerun (both in the concurrent group; the rerun
    killed after step 1 and resumed)."""
    return verl_run(*REPEATED), verl_run.rerun()


def _assert_no_process_left(run_dir: Path) -> None:
    manifest = runs.read_manifest(run_dir)
    ray_dir = manifest["command"].split("RAY_TMPDIR=")[1].split()[0]
    assert not Path(ray_dir).exists()
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if ray_dir in " ".join(p.info["cmdline"] or [])]
    assert not left, f"processes of the run outlived it: {left}"


def _assert_nothing_left(run_dir: Path, shm_before: set[str]) -> None:
    _assert_no_process_left(run_dir)
    # A neighbouring run's segments (CI beside a run) are held by its live processes; the run's own are not.
    assert not orphaned_shm(shm_before), "shared-memory segments outlived the run"


def _steps(run_dir: Path) -> dict[int, dict]:
    """Return each step's metrics, every attempt merged (a later attempt's line of the same step wins)."""
    steps: dict[int, dict] = {}
    for path in runs.attempt_files(run_dir):
        for raw in path.read_text().splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # the line a kill cut short
            steps[line["step"]] = {**steps.get(line["step"], {}), **line["data"]}
    return steps


def _changed(model_dir: Path, run_dir: Path) -> list[str]:
    from safetensors.torch import load_file

    before = load_file(model_dir / "model.safetensors")
    after = torch.load(run_dir / runs.CHECKPOINTS_DIR / "global_step_2" / heldout.ACTOR_WEIGHTS, weights_only=False)
    return [k for k, v in after.items() if k in before and not torch.equal(before[k].float(), v.float())] + \
        [k for k, v in after.items() if "lora_B" in k and v.abs().sum() > 0]


@pytest.mark.parametrize("experiment,arm", FAMILIES)
def test_two_verl_steps(verl_run, home, experiment, arm):
    run_dir = verl_run(experiment, arm)
    manifest = runs.read_manifest(run_dir)
    assert manifest["status"] == "finished" and manifest["platform"]["name"] == "cpu"
    steps = _steps(run_dir)
    assert sorted(steps) == [1, 2]
    for step, data in steps.items():
        for key in REQUIRED:
            assert isinstance(data.get(key), (int, float)) and math.isfinite(data[key]), (step, key, data.get(key))
        assert data[M.PROBS_DIFF_MIN] <= 0 <= data[M.PROBS_DIFF_MAX]
        assert data[M.PROBS_DIFF_ABS_MEAN] > 0  # two engines, two roundings
        # fp16 trains with verl's loss scaler, built for the CPU and active (a disabled scaler reports 1).
        assert (data[M.LOSS_SCALE] > 1) is (arm == "fp16")
    assert any(k.startswith("val-core/tiny_sanity_val/") for k in steps[2])
    assert _changed(SHIPPED_DIR, run_dir), "no parameter changed in two steps"
    logged = [json.loads(line) for line in _reward_log(home, experiment, arm, "first").read_text().splitlines()]
    assert logged and all(isinstance(x["truncated"], bool) for x in logged), "the reward function was not told about truncation"
    if EXTRA.get(experiment) == STOP:
        _assert_generation_stopped_at_the_stop_strings([x["response"] for x in logged], SHIPPED_DIR)


def _assert_generation_stopped_at_the_stop_strings(responses: list[str], model_dir: Path) -> None:
    """Every response ends at its first stop character or has none (the extension in verl_ext/rollout.py)."""
    vocab = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert all(sum(c in token for token in vocab) == 1 for c in STOP_CHARS), "STOP_CHARS no longer fit the tokenizer"
    first = [min((r.find(c) for c in STOP_CHARS if c in r), default=-1) for r in responses]
    assert all(i in (-1, len(r) - 1) for i, r in zip(first, responses, strict=True)), responses
    assert sum(i >= 0 for i in first) >= len(responses) // 4, "the stop strings never ended a response"


def test_make_heldout_turns_the_last_checkpoint_into_the_trained_model(verl_run, tmp_path):
    """``precision_rl.tiny.heldout`` finds verl's checkpoint where verl 0.9.1 writes it and writes exactly the
    trained weights, in fp32, as a model folder."""
    from safetensors.torch import load_file

    checkpoints = verl_run("sanity/grpo", "fp16") / runs.CHECKPOINTS_DIR
    assert heldout.checkpoint_steps(checkpoints) == [2]
    out = heldout.checkpoint_model(checkpoints / "global_step_2", tmp_path / "model")
    trained = torch.load(checkpoints / "global_step_2" / heldout.ACTOR_WEIGHTS, weights_only=False)
    written = load_file(out / "model.safetensors")
    assert written and all(torch.equal(v, trained[k].float()) for k, v in written.items())


def test_finished_runs_leave_their_compiled_kernels_and_model_records_to_the_next(verl_run):
    """Each run compiles into caches of its own, seeded from the project's (``launch.caches``): once the first group
    has finished, the project's caches hold TorchInductor's compiled code of verl's ``torch.compile``d functions and
    vLLM's record of the model class (vLLM 0.32 writes it under VLLM_CACHE_ROOT, in the part runs carry over, from
    ``vllm.model_executor.models.registry._LazyRegisteredModel``), which the next group starts from."""
    from precision_rl.launch.caches import VLLM_SHARED_PARTS

    verl_run("sanity/grpo", "fp16")
    architecture = json.loads((SHIPPED_DIR / "config.json").read_text())["architectures"][0]
    assert list(paths.inductor_cache_root().rglob("*.so")), "no compiled kernel reached the project's cache"
    assert list(paths.inductor_cache_root().glob("fxgraph/**/*")), "no FX graph reached the project's cache"
    assert [p for part in VLLM_SHARED_PARTS for p in (paths.vllm_cache_root() / part).rglob(f"*-{architecture}.json")]


def test_fp16_and_bf16_manifests_differ_only_in_precision(verl_run):
    fp16, bf16 = (runs.read_manifest(verl_run("sanity/grpo", arm)) for arm in ("fp16", "bf16"))
    differ = set(fp16["verl_overrides"]) ^ set(bf16["verl_overrides"])
    assert differ and all("param_dtype" in o or "rollout.dtype" in o or "VERL_FILE_LOGGER_PATH" in o
                          or "default_local_dir" in o or "experiment_name" in o or "rollout_data_dir" in o
                          for o in differ), differ
    assert fp16["spec"] == bf16["spec"] and fp16["platform"] == bf16["platform"]
    assert (fp16["precision"]["train"], bf16["precision"]["train"]) == ("fp16", "bf16")
    assert fp16["tiny_instrument"] == bf16["tiny_instrument"] and fp16["tiny_instrument"]["model_weights_sha256"]


def test_the_bf16_run_computed_with_the_emulated_bf16_gemm(verl_run):
    """The concurrent BF16 GRPO run had bf16 GEMMs emulated in both engines (forced, whatever this CPU has): it
    trains, and its mismatch stays at the bf16 level the native kernels give."""
    manifest = runs.read_manifest(verl_run("sanity/grpo", "bf16"))
    assert manifest["platform"]["bf16_gemm"] == "emulated"
    for data in _steps(verl_run("sanity/grpo", "bf16")).values():
        assert 0 < data[M.PROBS_DIFF_ABS_MEAN] < 0.05 and data[M.LOSS_SCALE] == 1


def _generations(folder: Path) -> dict[int, list[tuple]]:
    """Return verl's dumped rollouts (``trainer.rollout_data_dir``) by step, each as sorted (prompt, response,
    score) triples (verl orders a dump by its random sample ids)."""
    def triples(path: Path) -> list[tuple]:
        return sorted((d["input"], d["output"], d["score"]) for d in map(json.loads, path.read_text().splitlines()))

    return {int(p.stem): triples(p) for p in folder.glob("*.jsonl")}


def test_the_regression_gate_holds_the_grpo_pair_to_the_committed_two_step_runs(verl_run):
    fresh = [verl_run(*arm) for arm in GATED]
    if os.environ.get(WRITE_REFERENCE_ENV) == "1":
        numerics = {runs.numerics_key(runs.read_manifest(d)) for d in fresh}
        for experiment in {e for e, _ in GATED}:
            for old in run_dirs_under(paths.REFERENCE_DIR / "tiny" / experiment):
                if runs.numerics_key(runs.read_manifest(old)) in numerics:
                    shutil.rmtree(old)
        written = publish_runs(fresh, paths.REFERENCE_DIR, registered_only=False)
        pytest.skip(f"{WRITE_REFERENCE_ENV}=1: wrote the reference runs {', '.join(map(str, written))}")
    reference = load_committed_tables(paths.REFERENCE_DIR)
    table = load_runs(fresh, progress=False)
    gate = [r for r in checks.run_checks(table, reference=reference) if r.rule.startswith("regression/")]
    for run in table.runs.to_dict("records"):
        rules = {r.rule: r for r in gate if r.run == run["run"]}
        assert {"regression/reward", "regression/abs_log_ratio_median", "regression/token_kl",
                "regression/mean_abs_diff"} <= set(rules), \
            f"no committed 2-step run of {run['run']}'s configuration ({run['config']}) in {paths.REFERENCE_DIR}: " \
            f"write them with {WRITE_REFERENCE_ENV}=1"
        same_numerics = "regression/repeat" in rules
        for rule, result in rules.items():
            if rule in ("regression/reward", "regression/band", "regression/drift") and not same_numerics:
                continue  # other arithmetic draws other samples: 32 rewards are too few for a band across machines
            if rule.removeprefix("regression/") in checks.HEAVY_TAILED and result.status == "skip":
                continue  # a 2-step token mean: the median |log ratio| above stands for it
            assert result.status == "pass", result


def test_a_rerun_repeats_every_metric_and_each_sample_is_drawn_on_its_own(rerun, home):
    """Same seed, machine and code: the rerun (in another group of concurrent runs than the first; killed after step 1
    and resumed) logs the same value of every metric but the machine's time and memory, and generates the same
    samples; the samples of one group differ from each other (each has its own seed, where verl's full_determinism
    would give all of them one)."""
    first_dir, second_dir = rerun
    assert second_dir != first_dir
    first, second = _steps(first_dir), _steps(second_dir)
    assert sorted(first) == sorted(second) == [1, 2]
    for step in first:
        kept = lambda data: {k: v for k, v in data.items() if not k.startswith(M.MEASURED_PREFIXES)}  # noqa: E731
        differ = {k: (v, kept(second[step]).get(k)) for k, v in kept(first[step]).items() if kept(second[step]).get(k) != v}
        assert not differ, f"step {step}: the rerun logged other values: {differ}"
    generated = _generations(_rollouts(home, *REPEATED, "first"))
    assert sorted(generated) == [1, 2] and generated == _generations(_rollouts(home, *REPEATED, "rerun"))
    varied = []
    for samples in generated.values():
        groups = defaultdict(list)
        for prompt, response, _ in samples:
            groups[prompt].append(response)
        assert all(len(g) == 4 for g in groups.values()), {k: len(g) for k, g in groups.items()}
        varied += [len(set(g)) > 1 for g in groups.values()]
    # One seed for a whole group would give identical samples in every group; at TEMPERATURE the model alone is
    # that sure of 16 tokens for few problems.
    assert sum(varied) >= len(varied) / 2, f"only {sum(varied)} of {len(varied)} groups hold different samples"


def test_a_killed_launcher_leaves_nothing_and_resume_logs_every_step_once(rerun):
    """SIGKILL to the launcher after step 1: the guardian cleans up and marks the attempt killed, the readers skip
    the truncated last line, and RESUME=1 continues from verl's checkpoint; the merged table holds each step once."""
    from precision_rl.analysis.logs import build_table

    run_dir = rerun[1]
    attempts = runs.read_manifest(run_dir)["attempts"]
    assert [a["status"] for a in attempts] == ["killed", "finished"]
    assert attempts[0]["reason"].startswith("the launcher ended without cleaning up")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = build_table([load_run_dir(run_dir)]).metrics
    rewards = table[table["metric"] == M.REWARD]["step"].tolist()
    assert rewards == [1, 2]
    resumed = runs.attempt_files(run_dir)[1:]
    assert [json.loads(line)["step"] for line in resumed[0].read_text().splitlines()] == [2], \
        "the resumed attempt did not go on from the step-1 checkpoint"


def test_the_resumed_run_went_on_with_its_loss_scaler(rerun):
    """The rerun's second attempt restored the fp16 scaler from the step-1 checkpoint (verl 0.9.1 would restart it at
    a growth count of zero): at step 2 its scaler equals the uninterrupted first run's, which has counted every
    optimizer step of both steps."""
    states = [json.loads(Path(scaler_state_path(str(d / runs.CHECKPOINTS_DIR / "global_step_2" / heldout.ACTOR_WEIGHTS.parent), 0))
                         .read_text()) for d in rerun]
    assert states[0] == states[1]
    assert _steps(rerun[0])[2][M.SKIPPED_STEPS] == 0
    optimizer_steps = int(_override("data.train_batch_size")) // int(_override("actor_rollout_ref.actor.ppo_mini_batch_size"))
    assert states[0]["_growth_tracker"] == 2 * optimizer_steps


def _every_arm() -> list[tuple[str, str]]:
    from precision_rl.config.registry import load_all

    return [(name, arm) for name, spec in load_all("tiny").items() for arm in spec.arm_labels]


@pytest.mark.grid
@pytest.mark.parametrize("experiment,arm", _every_arm(), ids=[f"{e}-{a}" for e, a in _every_arm()])
def test_every_registered_arm_runs_two_verl_steps(verl_run, experiment, arm):
    """Every experiment x precision arm of the registry through verl at tiny scale (`make test-grid`, ~2 min each)."""
    from precision_rl.config.registry import load_experiment

    steps = _steps(verl_run(experiment, arm))
    if load_experiment(experiment, "tiny").hyper.val_only:
        assert sorted(steps) == [0], "an evaluation-only run validates once and stops"
        scores = [v for k, v in steps[0].items() if k.startswith("val-core/tiny_sanity_val/")]
        assert scores and all(math.isfinite(v) for v in scores)
        return
    assert sorted(steps) == [1, 2]
    for data in steps.values():
        for key in REQUIRED:
            assert isinstance(data.get(key), (int, float)) and math.isfinite(data[key]), (key, data.get(key))


def test_an_fp8_rollout_carries_ten_times_the_sequence_mismatch_of_an_fp16_one(verl_run):
    """The ladder's first quantized rung through verl: the rollout's linear layers in FP8 E4M3 (verl's scheme, on the
    CPU platform's GEMMs) against the same FP16 trainer, per-sequence KL[μ‖π] per step as the trainer logs it. The
    ratio is taken on the k3 estimate: the paper's k1 sum can be negative on a batch of 8 answers at FP16's ~1e-5 nats
    (as the offline FP16 / FP16 pair's is, results/mismatch_formats.md), which leaves no ratio to take."""
    fp8_dir = verl_run("ladder/grpo", "train_fp16-infer_fp8_e4m3")
    fp16, fp8 = _steps(verl_run("sanity/grpo", "fp16")), _steps(fp8_dir)
    assert runs.read_manifest(fp8_dir)["precision"]["rollout_quantization"]["format"] == "fp8_e4m3"
    for step in (1, 2):
        assert fp8[step][M.SEQUENCE_KL_K3] >= 10 * fp16[step][M.SEQUENCE_KL_K3] > 0, (step, fp8[step], fp16[step])
        assert math.isfinite(fp8[step][M.SEQUENCE_KL])
        assert fp8[step][M.PROBS_DIFF_ABS_MEAN] > fp16[step][M.PROBS_DIFF_ABS_MEAN]


def test_a_synthetic_rung_carries_its_calibrated_dose_and_its_control_carries_none(verl_run, home):
    """The synthetic mismatch through verl: the rollout's logits carry seeded noise (vLLM's logits processor), the
    trainer's do not, and the per-sequence KL[μ‖π] the trainer logs is the dose the same strength carries offline on
    the same prompts and sampling settings; in the control the trainer adds the same noise and the mismatch vanishes."""
    from precision_rl.data.recipes import dataset_file
    from precision_rl.mismatch.synthetic_dose import DoseSettings, measure
    from precision_rl.tiny import data as tiny_data

    rung_dir = verl_run("ladder/synthetic_s2", "fp16")
    rung, control = _steps(rung_dir), _steps(verl_run("ladder/synthetic_s2_control", "fp16"))
    noise = runs.read_manifest(rung_dir)["precision"]["synthetic_logit_noise"]
    assert noise["sigma"] == 2.0 and noise["seed"] == 42 and not noise["in_trainer"]
    train = dataset_file(home / "data", tiny_data.TRAIN_RECIPE, "train", tiny_data.TEMPLATE)
    settings = DoseSettings(str(SHIPPED_DIR), str(train), prompts=12, n=16, temperature=TEMPERATURE, max_tokens=16,
                            seed=42)
    calibrated = measure(settings, (noise["sigma"],), progress=lambda line: None)[0].sequence_kl
    logged = sum(rung[step][M.SEQUENCE_KL] for step in (1, 2)) / 2
    assert calibrated / 2 <= logged <= 2 * calibrated, (logged, calibrated)
    for step in (1, 2):
        assert control[step][M.SEQUENCE_KL_K3] < 1e-3 * rung[step][M.SEQUENCE_KL_K3], (step, control[step], rung[step])
