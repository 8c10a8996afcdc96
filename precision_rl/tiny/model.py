"""The tiny base model: a Qwen2-architecture causal LM with a locally trained byte-level BPE tokenizer.

It loads in both vLLM and transformers. ``build_random_model`` writes an untrained model (tests, fixtures);
``precision_rl.tiny.pretrain`` turns it into the SFT-trained base model of the tiny scale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from precision_rl.fileio import atomic_dir
from precision_rl.tiny.problems import make_problems, user_message

EOS, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SPECIAL_TOKENS = (EOS, IM_START, IM_END)
# As in DeepSeek-R1-Distill's tokenizer, the think tags are single added tokens but not special ones, so decoded
# text keeps them (the grader needs exactly one "</think>" in the response).
THINK_TOKENS = (THINK_OPEN, THINK_CLOSE)
# ChatML turns; the generation prompt opens the assistant turn with "<think>\n" as R1-Distill's template does.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def config_key(config) -> str:
    """Return a short hash of a configuration dataclass's values: the name of what it builds in the cache."""
    blob = json.dumps(dataclasses.asdict(config), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


@dataclass(frozen=True)
class TinyModelConfig:
    """Architecture and tokenizer of the tiny model (the cache key)."""

    vocab_size: int = 512
    hidden_size: int = 256
    intermediate_size: int = 704
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    tokenizer_corpus: int = 4000
    # How text is cut before BPE: "qwen2" (transformers' Qwen2Tokenizer's rule: NFC, digits one by one, which it
    # applies to any tokenizer it loads for a Qwen2 model) or "bytelevel" (GPT-2's, which such a load overrides).
    pre_tokenizer: str = "qwen2"
    seed: int = 1234

    def key(self) -> str:
        """Return a short hash identifying this configuration."""
        return config_key(self)


def build_tokenizer(config: TinyModelConfig):
    """Return a PreTrainedTokenizerFast trained locally on generated sanity-style text.

    With ``pre_tokenizer="qwen2"`` its normalizer and pre-tokenizer are those transformers' ``Qwen2Tokenizer``
    installs on every tokenizer it loads for a Qwen2 model (``transformers.models.qwen2.tokenization_qwen2``,
    5.19.0: NFC, then digits split one by one), so the saved ``tokenizer.json`` encodes text as verl and vLLM do
    whichever library reads it, and the BPE merges are learnt on the pieces the model will see.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    problems = make_problems(config.tokenizer_corpus, seed=config.seed)
    corpus = [f"{IM_START}user\n{user_message(p)}{IM_END}\n{IM_START}assistant\n{THINK_OPEN}\n{p.solution()}{IM_END}"
              for p in problems]
    tok = Tokenizer(models.BPE())
    if config.pre_tokenizer == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    elif config.pre_tokenizer == "bytelevel":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        raise ValueError(f"unknown pre_tokenizer {config.pre_tokenizer!r}: choose qwen2 or bytelevel")
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=config.vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, bos_token=EOS,
                                   additional_special_tokens=[IM_START, IM_END])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def qwen2_config(config: TinyModelConfig, tokenizer):
    """Return the transformers Qwen2Config of the tiny model."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, max_position_embeddings=config.max_position_embeddings,
        rope_theta=config.rope_theta, tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, torch_dtype="float32",
    )


def build_random_model(out_dir: Path, config: TinyModelConfig = TinyModelConfig()) -> Path:
    """Write an untrained tiny model (fp32 safetensors + tokenizer) to ``out_dir`` atomically; return the path."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = build_tokenizer(config)
    torch.manual_seed(config.seed)
    model = AutoModelForCausalLM.from_config(qwen2_config(config, tokenizer), dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "tiny_config.json").write_text(json.dumps(dataclasses.asdict(config), indent=2))
    return Path(out_dir)


def decoder_linear_slices(model_dir: Path | str) -> list[tuple[int, tuple[int, ...]]]:
    """Return (input width, output width of each fused slice) of every linear layer of the decoder of the model in
    ``model_dir`` (a Qwen2-style config), in order: per layer the fused QKV (q, k, v), the attention output, the fused
    gate-up (gate, up) and the down projection, as vLLM fuses them."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q_width, kv_width = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    per_layer = [(hidden, (q_width, kv_width, kv_width)), (q_width, (hidden,)), (hidden, (inner, inner)),
                 (inner, (hidden,))]
    return per_layer * config["num_hidden_layers"]


def decoder_linear_shapes(model_dir: Path | str) -> list[tuple[int, int]]:
    """Return (input width, output width) of every linear layer of the decoder of the model in ``model_dir``, the
    fused slices of ``decoder_linear_slices`` taken together, in order."""
    return [(width_in, sum(slices)) for width_in, slices in decoder_linear_slices(model_dir)]
