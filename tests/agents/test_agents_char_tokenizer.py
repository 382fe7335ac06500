"""The char-level tokenizer: one token per character, atomic specials, and its chat template."""

from __future__ import annotations

import string

import pytest
from jinja2.exceptions import TemplateError

from cogym.agents.char_tokenizer import BOS, END, PAD, ROLE_TOKENS, SPECIALS, UNK, build_char_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("text", ["37+45=82", "Solve: 12*3\nanswer is 36.", "  two  spaces ", "~!@#$%^&*()_{}|<>?"])
def test_round_trip_is_one_token_per_character(tok, text):
    ids = _encode(tok, text)
    assert len(ids) == len(text)
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def test_every_printable_character_has_its_own_id(tok):
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    ids = [_encode(tok, c) for c in chars]
    assert all(len(i) == 1 for i in ids)
    assert len({i[0] for i in ids}) == len(chars)
    assert len(tok) == len(SPECIALS) + len(chars)


def test_special_ids_are_declared(tok):
    assert tok.pad_token == PAD and tok.unk_token == UNK and tok.bos_token == BOS and tok.eos_token == END
    assert len({tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id}) == 4
    assert tok.padding_side == "left"


@pytest.mark.parametrize("special", [*ROLE_TOKENS, END])
def test_special_tokens_are_atomic(tok, special):
    ids = _encode(tok, f"a{special}b")
    assert ids == [_encode(tok, "a")[0], tok.convert_tokens_to_ids(special), _encode(tok, "b")[0]]


def test_unknown_character_maps_to_unk(tok):
    assert _encode(tok, "é") == [tok.unk_token_id]


def test_chat_template_renders_every_role_in_order(tok):
    messages = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "1+2"},
                {"role": "assistant", "content": "3"}]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == "<|system|>Solve.<|end|><|user|>1+2<|end|><|assistant|>3<|end|>"


def test_generation_prompt_ends_with_assistant_marker(tok):
    messages = [{"role": "user", "content": "7*6"}]
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == "<|user|>7*6<|end|><|assistant|>"
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert ids[0] == tok.convert_tokens_to_ids("<|user|>")
    assert ids[-1] == tok.convert_tokens_to_ids("<|assistant|>")
    assert ids[-2] == tok.eos_token_id
    assert len(ids) == 1 + 3 + 1 + 1  # marker, three characters, end, generation marker


@pytest.mark.parametrize("role", ["tool", "System", "judge"])
def test_unknown_role_raises(tok, role):
    with pytest.raises(TemplateError, match=f"unknown chat role: {role}"):
        tok.apply_chat_template([{"role": role, "content": "x"}], tokenize=False)


def test_save_and_reload_keeps_vocab_and_template(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    messages = [{"role": "system", "content": "Propose."}, {"role": "user", "content": "Propose a problem."}]
    assert again.apply_chat_template(messages, add_generation_prompt=True, return_dict=False) == \
        tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert again.eos_token_id == tok.eos_token_id and again.pad_token_id == tok.pad_token_id
