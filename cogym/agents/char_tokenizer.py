"""A character-level tokenizer in Hugging Face format, with a chat template.

Every printable ASCII character (and newline) is one token; the chat markers ``<|system|>``,
``<|user|>``, ``<|assistant|>`` and the end-of-message token ``<|end|>`` are atomic special
tokens. The result is a ``PreTrainedTokenizerFast`` that ``save_pretrained`` writes as
``tokenizer.json`` + ``tokenizer_config.json`` (with the chat template), so the embedded model
loads with ``AutoTokenizer.from_pretrained(path)`` like any other.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, UNK, BOS, END = "<pad>", "<unk>", "<s>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIALS = (PAD, UNK, BOS, END, *ROLE_TOKENS)

# Roles other than these raise inside the template, so a typo in a prompt config fails loudly.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown chat role: ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=END,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=list(ROLE_TOKENS),
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
