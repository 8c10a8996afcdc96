"""The README's contract through make: help is the default, and the paper command prints exactly one line."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from precision_rl.paths import REPO_ROOT

VENV = Path(sys.executable).parent.parent


def make(*args: str, **environ: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CONDA_DEFAULT_ENV", "PYTHON_ENV")}
    env.update(PRECISION_RL_RUNS=str(REPO_ROOT / ".cache" / "test-runs-unused"), **environ)
    return subprocess.run(["make", "-s", f"VENV={VENV}", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=env, timeout=120)


def _own_lines(stderr: str) -> list[str]:
    """Return the lines of ``stderr`` but make's own closing report that a recipe failed ("make: *** [...] Error")."""
    return [line for line in stderr.strip().splitlines() if not re.match(r"make(\[\d+\])?: \*\*\* \[", line)]


def test_make_prints_help_by_default_on_one_screen():
    out = make().stdout
    for target in ("setup", "test", "lint", "list", "run", "grid", "sanity-fp16", "check", "figures"):
        assert f"{target} " in out, target
    assert len(out.splitlines()) <= 40
    every = make("help-all").stdout
    for target in ("sanity-bf16", "sanity", "octothinker", "lora", "moe", "dense14b", "ablation", "fork-ablation",
                   "eval-precision", "fp16-comparison", "bench-tiny", "mismatch-width"):
        assert f"{target} " in every, target


def test_make_run_takes_the_registry_name():
    result = make("run", "EXP=sanity/gspo", "PRECISION=bf16", "SEED=7", "SCALE=paper", "DRY_RUN=1")
    assert result.returncode == 0, result.stderr
    line, = result.stdout.strip().splitlines()
    assert "trainer.experiment_name=sanity.gspo-bf16-s7" in line and "policy_loss.loss_mode=gspo" in line


def test_a_panel_shortcut_prints_the_make_run_that_renders_the_same_runs():
    shortcut = make("fp16-comparison", "SCALE=paper", "DRY_RUN=1")
    assert "make fp16-comparison = make run EXP='sanity/*' PANEL=fig4" in shortcut.stderr
    same = make("run", "EXP=sanity/*", "PANEL=fig4", "SCALE=paper", "DRY_RUN=1")
    names = [re.findall(r"trainer\.experiment_name=(\S+)", r.stdout) for r in (shortcut, same)]
    assert names[0] == names[1] and len(names[0]) == 5


def test_make_grid_takes_a_panel_as_make_run_does():
    result = make("grid", "PANEL=ladder_fig1b", "SCALE=tiny", "DRY_RUN=1")
    assert result.returncode == 0, result.stderr
    planned = set(re.findall(r"^\s*\d+\s+(\S+)-s42\b", result.stderr, flags=re.M))
    assert planned == {"ladder.synthetic_s3_grpo_token_tis-fp16", "ladder.synthetic_s3_grpo_token_tis_control-fp16",
                       "sanity.grpo_token_tis-fp16"}, result.stderr


def test_a_shortcut_says_what_it_runs_and_refuses_another_experiment():
    result = make("sanity-bf16", "SCALE=paper", "DRY_RUN=1")
    assert result.returncode == 0 and "make sanity-bf16 = make run EXP='sanity/grpo' PRECISION=bf16" in result.stderr
    refused = make("sanity-fp16", "EXP=sanity/gspo", "SCALE=paper", "DRY_RUN=1")
    assert refused.returncode == 2 and refused.stdout == ""
    assert _own_lines(refused.stderr) == ["make sanity-fp16 runs sanity/grpo; for other experiments use make run "
                                          "EXP=... or make grid EXP=..."]


@pytest.mark.parametrize(("args", "message"), [
    (("run",), "make run needs EXP=<experiment> (make list prints them), e.g. make run EXP=sanity/grpo"),
    (("figures", "SCALE=huge"), "SCALE must be auto, paper or tiny, got 'huge'"),
    (("run", "EXP=sanity/grpo", "SEED=x"), "SEED must be a non-negative integer, got 'x'"),
    (("run", "EXP=sanity/grpo", "DRY_RUN=maybe"), "DRY_RUN must be one of 1 true yes 0 false no or empty, got 'maybe'"),
    (("tiny-model", "REBUILD=maybe"), "REBUILD must be one of 1 true yes 0 false no or empty, got 'maybe'"),
    (("sanity-fp16", "ALGO=gspo"), "ALGO is gone: experiments are chosen by EXP=<name or glob>"),
    (("run", "EXP=sanity/grpo", "GPUS=abc"), "GPUS must be a positive integer, got 'abc'"),
    (("show",), "make show needs EXP=<experiment>"),
    (("sanity-fp16", "PRECISION=bf16", "SCALE=paper", "DRY_RUN=1"),
     "make sanity-fp16 runs PRECISION=fp16; for another use make run EXP='sanity/grpo' PRECISION=bf16"),
    (("grid", "GRID=sanity/*"), "GRID is gone: experiments are chosen by EXP=<name or glob>"),
    (("run", "EXP=sanity/gpro", "SCALE=paper", "DRY_RUN=1"), "unknown experiment 'sanity/gpro' (did you mean"),
    (("setup", "PYTHON_ENV=conda"), "PYTHON_ENV must be venv or active, got 'conda'"),
])
def test_a_wrong_variable_is_one_line_and_a_failure(args, message):
    result = make(*args)
    assert result.returncode != 0 and result.stdout == ""
    lines = _own_lines(result.stderr)
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_make_sanity_fp16_paper_dry_run_prints_the_verl_command():
    result = make("sanity-fp16", "SCALE=paper", "DRY_RUN=1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16" in lines[0]
    assert "actor_rollout_ref.rollout.dtype=float16" in lines[0]
    assert not (REPO_ROOT / ".cache" / "test-runs-unused").exists()


def test_make_list_prints_the_registry():
    out = make("list").stdout
    assert "sanity/pg_seq_mis" in out and "dense14b/dapo" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and "/" in line.split()[0]}
    sourced, assumed, conflict = (int(v) for v in rows["moe/grpo_seq_mis"][-3:])
    assert assumed == 13 and conflict == 0 and sourced > 0
    assert [int(v) for v in rows["sanity/grpo"][-2:]] == [0, 4]  # grader, val top_p, clip-higher, cadence


def test_make_show_names_the_profile_s_last_step():
    quick, calibrated = make("show", "EXP=sanity/grpo", "SCALE=tiny"), make("show", "EXP=sanity/grpo", "SCALE=tiny",
                                                                             "PROFILE=calibrated")
    assert quick.returncode == calibrated.returncode == 0, quick.stderr + calibrated.stderr
    assert ("# PROFILE=quick: trains to step 25, a checkpoint every 5 steps (overrides: +trainer.stop_after_step=25 "
            "trainer.save_freq=5)") in quick.stdout
    assert "# PROFILE=calibrated: trains to step 300\n" in calibrated.stdout


def test_targets_that_read_runs_take_profile_only_when_it_is_given():
    def recipe(*args):
        out = make("-n", *args)
        assert out.returncode == 0, out.stderr
        return out.stdout
    assert "--profile" not in recipe("check") and "--profile quick" in recipe("check", "PROFILE=quick")
    assert "--profile calibrated" in recipe("publish", "PROFILE=calibrated")
    assert "--profile calibrated" in recipe("published-results")
    assert "--profile quick" in recipe("figures")


def test_make_ladder_runs_pg_seq_is_at_sigma_3_then_its_control_and_refuses_other_choices():
    result = make("ladder", "SCALE=tiny", "DRY_RUN=1", "SEED=7")
    assert result.returncode == 0, result.stderr
    names = re.findall(r"trainer\.experiment_name=(\S+)", result.stdout)
    assert names == ["ladder.synthetic_s3_pg_seq_is-fp16-s7", "ladder.synthetic_s3_pg_seq_is_control-fp16-s7"]
    refused = make("ladder", "PRECISION=bf16", "DRY_RUN=1")
    assert refused.returncode == 2 and "make ladder runs ladder/synthetic_s3_pg_seq_is and its control" in refused.stderr
    paper = make("ladder", "SCALE=paper", "DRY_RUN=1")
    assert paper.returncode != 0 and "tiny scale only" in paper.stderr


MAKE_BUILTINS = {"MAKEFILE_LIST", "MAKECMDGOALS", "MAKE", "CURDIR", "SHELL", "PYTHONPATH"}
ENVIRONMENT_ONLY = {"PRECISION_RL_RUNS", "CONDA_DEFAULT_ENV"}  # read through RUNS_DIR and PYTHON_ENV, whose lines name them
RETIRED = {"ALGO", "GRID", "RUN"}  # read only to refuse them in one line


def test_every_variable_the_makefile_reads_is_declared_at_the_top_and_listed_by_make_help():
    text = (REPO_ROOT / "Makefile").read_text()
    read = set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text))
    for names in re.findall(r"\$\(foreach v,([A-Z_ ]+),", text):
        read |= set(names.split())
    internal = set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*(?::=|\+=|=)", text, re.M))
    # Variables a macro defines per view: $(1)_TABLE with $(1) = LOCAL or PUBLISHED.
    internal |= {f"{view}{suffix}" for view in ("LOCAL", "PUBLISHED")
                 for suffix in re.findall(r"^\$\(1\)(_[A-Z_]+)\s*(?::=|=)", text, re.M)}
    settings = read - internal - MAKE_BUILTINS - ENVIRONMENT_ONLY - RETIRED
    documented = re.findall(r"^#> ([A-Z][A-Z0-9_]*)=", text, re.M)
    assert len(documented) == len(set(documented)), "a variable is documented twice"
    assert settings <= set(documented), f"read but not declared with a `#>` line: {sorted(settings - set(documented))}"
    first_settings_line = text.index("\n#> ")
    for name in documented:
        declared = re.search(rf"^{name} \?=", text, re.M)
        assert declared and declared.start() > first_settings_line, f"{name} has no `?=` declaration in the settings block"
        assert len(re.findall(rf"^{name} \?=", text, re.M)) == 1, f"{name} is declared twice"
    listed = make("help").stdout
    for name in documented:
        assert f"{name}=" in listed, f"make help does not list {name}"


def test_every_module_main_the_makefile_calls_is_named_in_the_cli_help():
    from precision_rl.cli import TOOLS, build_parser

    text = (REPO_ROOT / "Makefile").read_text()
    called = set(re.findall(r"-m (precision_rl\.[\w.]+)", text))
    assert called == set(TOOLS), f"called but not in cli.TOOLS: {called - set(TOOLS)}; gone: {set(TOOLS) - called}"
    shown = build_parser().format_help()
    for module, about in TOOLS.items():
        assert module in shown
        target = re.search(r"make ([\w-]+)\)$", about).group(1)
        assert re.search(rf"^{target}:", text, re.M), f"{module} names make {target}, which is no target"


def test_the_makefile_draws_the_figures_the_code_defines_and_their_quick_versions_where_figures_say():
    from precision_rl.analysis import figures as F
    from precision_rl.paths import FIGURES_DIR, QUICK_FIGURES_DIR

    text = (REPO_ROOT / "Makefile").read_text().replace("\\\n", " ")

    def words(variable):
        return re.search(rf"^{variable} := (.*)$", text, re.M).group(1).split()

    assert words("FIGURES") == list(F.FIGURES) and words("QUICK_FIGURES") == list(F.QUICK_VERSIONS)
    quick_line = next(line for line in text.splitlines() if "--only $(QUICK_FIGURES)" in line)
    assert f"--out $(PUBLISHED_FIGURES)/{QUICK_FIGURES_DIR.relative_to(FIGURES_DIR)} --profile quick" in quick_line


def test_runs_dir_is_where_make_run_puts_a_run(tmp_path):
    out = make("run", "EXP=sanity/grpo", "PRECISION=fp16", "SCALE=tiny", "DRY_RUN=1", f"RUNS_DIR={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert f"VERL_FILE_LOGGER_PATH={tmp_path}/tiny/sanity/grpo/fp16/s42-" in out.stdout
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"


def test_inside_the_gpu_conda_environment_make_uses_its_python_and_never_builds_the_cpu_venv(tmp_path):
    venv_recipe = make("-n", "preflight", "EXP=sanity/grpo", "GPUS=8", "VENV=" + str(tmp_path / "venv")).stdout
    assert "-m venv" in venv_recipe and f"{tmp_path}/venv/bin/python -m precision_rl preflight" in venv_recipe
    for how in ({"CONDA_DEFAULT_ENV": "precision-rl"}, {"PYTHON_ENV": "active"}):
        recipe = make("-n", "preflight", "EXP=sanity/grpo", "GPUS=8", "VENV=" + str(tmp_path / "venv"), **how).stdout
        assert "-m venv" not in recipe and "pip install" not in recipe, how
        assert re.search(r"^python -m precision_rl preflight .*--gpus 8", recipe, re.M), recipe


def test_an_active_python_without_verl_is_one_line_naming_the_fix(tmp_path):
    (tmp_path / "python").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "python").chmod(0o755)
    result = make("setup", PYTHON_ENV="active", PATH=f"{tmp_path}:{os.environ['PATH']}")
    assert result.returncode != 0
    lines = _own_lines(result.stderr)
    assert len(lines) == 1 and "lacks torch or verl: conda activate precision-rl" in lines[0], result.stderr
