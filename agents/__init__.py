"""cogym agents: who plays a seat. ``Policy`` (a causal LM with its tokenizer), ``LLMAgent`` (a policy
playing seats), ``ScriptedAgent`` (a fixed strategy), and the types they exchange with a rollout:
``Request`` (what a seat is asked), ``Action`` (its answer), ``Turn`` (a model move as a learner sees it).

    from cogym.agents import LLMAgent, Policy, SamplingParams
    agent = LLMAgent(Policy.from_pretrained("tiny"), SamplingParams(max_new_tokens=8))

Names are imported on first use, so ``import cogym.agents.types`` (which the games' rollout code
uses) does not load torch or transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Policy": "policy", "SamplingParams": "policy", "Generation": "policy", "tiny_model_path": "policy",
    "resolve_model_dir": "policy", "load_causal_lm": "policy",
    "LLMAgent": "llm",
    "ScriptedAgent": "scripted",
    "Agent": "types", "Request": "types", "Action": "types", "Turn": "types", "Token": "types", "Message": "types",
    "TokenStreaming": "types",
    "Conversation": "conversation",
    "GenerationBackend": "backends", "HFBackend": "backends",
    "PolicyStreams": "streaming", "TextStreams": "text_streams",
    "LoraConfig": "lora", "LoraBase": "lora",
    "ModelLoadError": "errors",
    "derive_key": "sampling",
}

__all__ = ["Action", "Agent", "Conversation", "derive_key", "Generation", "GenerationBackend", "HFBackend",
           "LLMAgent", "load_causal_lm", "LoraBase", "LoraConfig", "Message", "ModelLoadError", "Policy",
           "PolicyStreams", "Request", "resolve_model_dir", "SamplingParams", "ScriptedAgent", "TextStreams",
           "tiny_model_path", "Token", "TokenStreaming", "Turn"]  # every name of _EXPORTS


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names above load on first use
    from .backends import GenerationBackend, HFBackend
    from .conversation import Conversation
    from .errors import ModelLoadError
    from .llm import LLMAgent
    from .lora import LoraBase, LoraConfig
    from .policy import Generation, Policy, SamplingParams, load_causal_lm, resolve_model_dir, tiny_model_path
    from .sampling import derive_key
    from .scripted import ScriptedAgent
    from .streaming import PolicyStreams
    from .text_streams import TextStreams
    from .types import Action, Agent, Message, Request, Token, TokenStreaming, Turn
