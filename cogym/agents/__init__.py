"""cogym agents: who plays a seat. ``Policy`` (a causal LM with its tokenizer), ``LLMAgent`` (a policy
playing seats), ``ScriptedAgent`` (a fixed strategy), and the types they exchange with a rollout:
``Request`` (what a seat is asked), ``Action`` (its answer), ``Turn`` (a model move as a learner sees it).

    from cogym.agents import LLMAgent, Policy, SamplingParams
    agent = LLMAgent(Policy.from_pretrained("tiny"), SamplingParams(max_new_tokens=8))

Names are imported on first use, so ``import cogym.agents`` does not load torch or transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cogym.core.lazy import lazy_exports

_EXPORTS = {
    "Policy": "policy", "SamplingParams": "cogym.core.types", "Generation": "cogym.core.types",
    "tiny_model_path": "loading", "resolve_model_dir": "loading", "load_causal_lm": "loading",
    "LLMAgent": "llm",
    "ScriptedAgent": "scripted",
    "Agent": "cogym.core.types", "Request": "cogym.core.types", "Action": "cogym.core.types", "Turn": "cogym.core.types",
    "Token": "cogym.core.types", "Message": "cogym.core.types", "TokenStreaming": "cogym.core.types",
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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names above load on first use
    from cogym.agents.backends import GenerationBackend, HFBackend
    from cogym.agents.conversation import Conversation
    from cogym.agents.errors import ModelLoadError
    from cogym.agents.llm import LLMAgent
    from cogym.agents.lora import LoraBase, LoraConfig
    from cogym.agents.loading import load_causal_lm, resolve_model_dir, tiny_model_path
    from cogym.agents.policy import Policy
    from cogym.core.types import Generation, SamplingParams
    from cogym.agents.sampling import derive_key
    from cogym.agents.scripted import ScriptedAgent
    from cogym.agents.streaming import PolicyStreams
    from cogym.agents.text_streams import TextStreams
    from cogym.core.types import Action, Agent, Message, Request, Token, TokenStreaming, Turn
