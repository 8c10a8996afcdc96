"""What one mismatch run measures: model, prompts, sampling settings and the (train, infer) dtype pairs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from precision_rl.config.precision import PRECISIONS, ROLLOUT_FORMATS, PrecisionArm, check_precision
from precision_rl.config.scale import PAPER, TINY
from precision_rl.errors import UserError
from precision_rl.paths import tiny_models_root

GPU_DEFAULT_MODEL = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
# Fig. 5's sequences reach ~26K tokens, so the paper's generation budget was about 32K
# (docs/figures.md#fig-5-offline-mismatch).
GPU_MAX_TOKENS = 32768
TINY_DATA = "tiny"
# ``tiny:<min>-<max>``: generated problems of that many operations (``tiny`` alone: the tiny sanity set's range).
_TINY_RANGE = re.compile(r"^tiny:(\d+)-(\d+)$")
TRAIN_MODES = ("fsdp", "pure")
REFERENCE = "fp32"


@dataclass(frozen=True)
class MismatchConfig:
    """One mismatch run. ``pairs`` are the (train, infer) arms to write; ``reference`` adds fp32 recomputes."""

    model: str
    data: str = TINY_DATA
    dtypes: tuple[str, ...] = ("bf16", "fp16")
    pairs: tuple[PrecisionArm, ...] = ()
    n: int = 8
    max_tokens: int = 128
    num_prompts: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    train_mode: str = "fsdp"
    reference: bool = True
    exact_kl: str = "auto"
    ignore_eos: bool = False
    max_model_len: int = 512
    batch_tokens: int = 8192
    logit_elems: int = 1 << 24
    overwrite: bool = False
    name: str | None = None
    device: str = "cpu"

    def __post_init__(self):
        for d in self.dtypes:
            check_precision(d, "mismatch dtype")
        if not self.dtypes:
            raise UserError("DTYPES is empty: give at least one of " + ", ".join(PRECISIONS))
        if self.n < 1 or self.max_tokens < 1 or self.num_prompts < 1:
            raise UserError(f"N, MAX_TOKENS and the prompt count must be >= 1 (got {self.n}, {self.max_tokens}, "
                            f"{self.num_prompts})")
        if self.train_mode not in TRAIN_MODES:
            raise UserError(f"unknown training-engine mode {self.train_mode!r}: choose one of {', '.join(TRAIN_MODES)}")
        if self.exact_kl not in ("auto", "on", "off"):
            raise UserError(f"exact KL must be auto, on or off, got {self.exact_kl!r}")
        if self.temperature <= 0:
            raise UserError(f"temperature must be > 0, got {self.temperature}")
        if self.top_p != 1.0:
            raise UserError("top_p must be 1: with top_p < 1, mu is the truncated distribution, which the "
                            "teacher-forced recompute does not model")
        quantized = sorted({a.infer for a in self.pairs if a.rollout_quantization})
        if quantized and self.device != "cpu":
            raise UserError(f"a quantized rollout ({', '.join(quantized)}) is measured on a CPU only, where the suite's "
                            "vLLM linear layers quantize as verl's FP8 rollout does; on GPUs run the ladder's arm "
                            "through verl (experiments/ladder/grpo.yaml)")
        tiny_ops(self.data)

    @property
    def scale(self) -> str:
        """Return the figure scale the results belong to: ``tiny`` on a CPU, ``paper`` on a GPU."""
        return TINY if self.device == "cpu" else PAPER

    @property
    def rollouts(self) -> tuple[tuple[str, str], ...]:
        """Return every vLLM sampling pass the pairs need, as (rollout format, engine dtype): a floating-point rollout
        runs in its own format, a quantized one in its pair's training format (``PrecisionArm.rollout_dtype``); in a
        stable order, floating-point rollouts first."""
        return tuple(sorted({rollout_of(a) for a in self.pairs},
                            key=lambda r: (ROLLOUT_FORMATS.index(r[0]), PRECISIONS.index(r[1]))))

    def train_dtypes_for(self, rollout: tuple[str, str]) -> tuple[str, ...]:
        """Return the training dtypes recomputed on the samples of ``rollout`` (pairs first, then the reference)."""
        wanted = [a.train for a in self.pairs if rollout_of(a) == rollout]
        if self.reference and REFERENCE not in wanted:
            wanted.append(REFERENCE)
        return tuple(dict.fromkeys(wanted))


def rollout_of(arm: PrecisionArm) -> tuple[str, str]:
    """Return the sampling pass ``arm``'s samples come from: (rollout format, the dtype its engine runs in)."""
    return arm.infer, arm.rollout_dtype


def parse_dtypes(text: str | list[str]) -> tuple[str, ...]:
    """Return the dtype names in ``text`` (space or comma separated), each checked against the precision table."""
    items = text if isinstance(text, list) else [text]
    names = [t for chunk in items for t in re.split(r"[\s,]+", chunk) if t]
    for name in names:
        check_precision(name, "mismatch dtype")
    return tuple(dict.fromkeys(names))


def parse_pairs(text: str | None, dtypes: tuple[str, ...]) -> tuple[PrecisionArm, ...]:
    """Return the (train, infer) pairs: ``self`` (each dtype with itself), ``all`` (every train x infer over
    ``dtypes``), or an explicit list like ``bf16-fp16,fp16-bf16`` (train-infer; the infer side may be a quantized
    rollout format, ``fp16-fp8_e4m3``). Self pairs always come first."""
    pairs = [PrecisionArm(d, d) for d in dtypes]
    text = (text or "self").strip()
    if text == "all":
        pairs += [PrecisionArm(t, i) for t in dtypes for i in dtypes]
    elif text != "self":
        for item in re.split(r"[\s,]+", text):
            if not item:
                continue
            parts = item.split("-")
            if len(parts) != 2:
                raise UserError(f"bad pair {item!r}: write train-infer, e.g. bf16-fp16 (or PAIRS=self / all)")
            pairs.append(PrecisionArm(parts[0], parts[1]))
    return tuple(dict.fromkeys(pairs))


def tiny_ops(data: str) -> tuple[int, int] | None:
    """Return the (min, max) operations per problem of a generated-prompt spec (``tiny``: the tiny recipe's range;
    ``tiny:2-24``), None for any other data; raise UserError for a malformed ``tiny:`` spec."""
    if data == TINY_DATA:
        from precision_rl.tiny.pretrain import PretrainConfig

        return PretrainConfig.min_ops, PretrainConfig.max_ops
    if not data.startswith(f"{TINY_DATA}:"):
        return None
    match = _TINY_RANGE.match(data)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise UserError(f"bad generated-prompt spec {data!r}: write {TINY_DATA}:<min ops>-<max ops>, e.g. tiny:2-24")
    return int(match.group(1)), int(match.group(2))


def pair_dirname(arm: PrecisionArm) -> str:
    """Return a pair's result directory name ``<train>-<infer>``."""
    return f"{arm.train}-{arm.infer}"


def model_slug(model: str) -> str:
    """Return the directory name of a model: ``tiny-<build key>`` for a cached tiny model, a local dir's name, or an
    HF id with ``/`` written as ``--``."""
    path = Path(model)
    if path.exists():
        path = path.resolve()
        return f"tiny-{path.name}" if path.parent == tiny_models_root() else path.name
    return model.strip("/").replace("/", "--")


def default_model(device: str) -> str:
    """Return the default model: the trained tiny model on CPU (the random tiny model until the SFT one exists),
    R1-Distill-1.5B on a GPU. This is the one place the lead switches when the SFT model lands."""
    if device != "cpu":
        return GPU_DEFAULT_MODEL
    try:
        from precision_rl.tiny.pretrain import ensure_tiny_model  # lands with the tiny-scale issue
    except ImportError:
        from precision_rl.paths import cache_root
        from precision_rl.tiny.model import build_random_model

        out = cache_root() / "tiny-random"
        if not (out / "config.json").is_file():
            build_random_model(out)
        return str(out)
    return str(ensure_tiny_model())


def gpu_max_prompt_tokens() -> int:
    """Return the prompt-length limit of the GPU default prompts, which are the sanity set's: the instrument's
    ``max_prompt_length``."""
    from precision_rl.config.registry import INSTRUMENT_EXPERIMENT, load_experiment

    return int(load_experiment(INSTRUMENT_EXPERIMENT).hyper.max_prompt_length)
