"""Game registry: one line per game and version, ``make("proposer_solver-v0", num_solvers=4)``.

A registration also carries the game's scripted twins (role -> strategy name -> function of
``(observation_text, rng) -> action_text``), so runners and tests can seat a scripted player
for any role of any registered game without importing the game module.

The shipped games are the table :data:`BUILTIN`, registered on the first lookup; a user's game is
registered by its module calling :func:`register` (a module a config lists in ``game.modules``).
"""

from __future__ import annotations

import inspect
import re
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from cogym.core.names import did_you_mean
from cogym.core.processes import load_object, register_builtin
from cogym.envs.base import CogymEnv
from cogym.envs.errors import GameError
from cogym.envs.token_level import Codec, TokenLevelEnv, wrap

ScriptedFn = Callable[[str, np.random.Generator], str]
_ID_RE = re.compile(r"[a-z][a-z0-9_]*-v[0-9]+")


@dataclass(frozen=True)
class Registration:
    """What ``register`` stored for one game id."""

    id: str
    entry_point: Callable[..., CogymEnv]
    default_kwargs: Mapping[str, Any] = field(default_factory=dict)
    scripted: Mapping[str, Mapping[str, ScriptedFn]] = field(default_factory=dict)

    def argument_names(self) -> list[str] | None:
        """The keyword arguments the entry point takes, or None if it takes ``**kwargs``."""
        params = inspect.signature(self.entry_point).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
        return [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


_REGISTRY: dict[str, Registration] = {}
# The shipped games, in the order ``registered()`` lists them: id -> "module:entry point"; the module
# holds the game's scripted twins as SCRIPTED. Registered on the first lookup (importing these modules).
BUILTIN: dict[str, str] = {
    "proposer_solver-v0": "cogym.envs.proposer_solver:ProposerSolverEnv",
    "generator_verifier-v0": "cogym.envs.generator_verifier:GeneratorVerifierEnv",
    "proposer_solver_judge-v0": "cogym.envs.proposer_solver_judge:ProposerSolverJudgeEnv",
    "kuhn_poker-v0": "cogym.envs.kuhn_poker:KuhnPokerEnv",
    "debate-v0": "cogym.envs.debate:DebateEnv",
    "interruptible_verifier-v0": "cogym.envs.interruptible_verifier:InterruptibleVerifierEnv",
    "search_qa-v0": "cogym.envs.search_qa:SearchQAEnv",
    "search_self_play-v0": "cogym.envs.search_self_play:SearchSelfPlayEnv",
}
_BUILTIN_LOCK = threading.RLock()
# Game sources: ``<prefix>:<name>`` ids resolved on first use by a function of ``name`` in a module
# imported then (so an optional library is imported only by whoever plays its games).
SOURCES: dict[str, str] = {"openspiel": "cogym.envs.openspiel:resolve", "textarena": "cogym.envs.textarena:resolve"}
_RESOLVED: dict[str, Registration] = {}


def _from_source(id: str) -> Registration | None:
    prefix, sep, name = id.partition(":")
    if not sep or prefix not in SOURCES:
        return None
    if id not in _RESOLVED:
        _RESOLVED[id] = load_object(SOURCES[prefix])(name)
    return _RESOLVED[id]


def _check_arguments(reg: Registration, kwargs: Mapping[str, Any]) -> None:
    names = reg.argument_names()
    if names is None:
        return
    for key in kwargs:
        if key not in names:
            hint = did_you_mean(key, names, form="; did you mean {}?")
            raise GameError(f"game {reg.id!r} has no argument {key!r}{hint} Its arguments are: {', '.join(names)}")


def register(
    id: str,
    entry_point: Callable[..., CogymEnv],
    *,
    scripted: Mapping[str, Mapping[str, ScriptedFn]] | None = None,
    **default_kwargs: Any,
) -> None:
    """Register a game under ``id`` (``name-vN``); ``default_kwargs`` are passed to every ``make``.

    ``scripted`` maps each role to its scripted twins (name -> function).
    """
    _register_builtin()
    _store(id, entry_point, scripted, default_kwargs)


def _store(id: str, entry_point: Callable[..., CogymEnv], scripted: Mapping[str, Mapping[str, ScriptedFn]] | None,
           default_kwargs: Mapping[str, Any]) -> None:
    if not isinstance(id, str) or _ID_RE.fullmatch(id) is None:
        raise GameError(f"game id must look like 'name-v0' (lowercase name, '-v', version number), got {id!r}")
    if id in _REGISTRY:
        raise GameError(f"game {id!r} is already registered; bump the version (e.g. '{id.rsplit('-v', 1)[0]}-v{int(id.rsplit('-v', 1)[1]) + 1}') to change a game")
    if not callable(entry_point):
        raise TypeError(f"entry_point of {id!r} must be callable, got {type(entry_point).__name__}")
    frozen_scripted = MappingProxyType({role: MappingProxyType(dict(fns)) for role, fns in (scripted or {}).items()})
    reg = Registration(id=id, entry_point=entry_point, default_kwargs=MappingProxyType(dict(default_kwargs)), scripted=frozen_scripted)
    _check_arguments(reg, default_kwargs)
    _REGISTRY[id] = reg


def _register_builtin() -> None:
    """Register the shipped games not registered yet (with the SCRIPTED twins of their module)."""
    register_builtin(_REGISTRY, BUILTIN, _BUILTIN_LOCK,
                     lambda id, ref: _store(id, load_object(ref), load_object(ref.split(":")[0] + ":SCRIPTED"), {}))


def _lookup(id: str) -> Registration:
    sourced = _from_source(id) if isinstance(id, str) else None
    if sourced is not None:
        return sourced
    _register_builtin()
    if id not in _REGISTRY:
        known = sorted(_REGISTRY)
        hint = did_you_mean(id, known, form="; did you mean {}?")
        raise GameError(f"unknown game {id!r}{hint} Registered games: {', '.join(known) or '(none)'}. A game written in "
                        "your own module is registered when the module is imported: list it in the config's game.modules "
                        "(e.g. game.modules: [mygame.py], a path relative to the config file) or pass --module mygame.py "
                        "(cogym games, cogym tournament)")
    return _REGISTRY[id]


def module_of(id: str) -> str | None:
    """The module whose code registered game ``id`` (its entry point's module), or None if ``id`` is not
    registered: what a command that reproduces a user's game imports first."""
    _register_builtin()
    reg = _REGISTRY.get(id)
    if reg is None and isinstance(id, str) and id.partition(":")[0] in SOURCES:
        return SOURCES[id.partition(":")[0]].split(":")[0]
    return getattr(reg.entry_point, "__module__", None) if reg is not None else None


def make(id: str, *, granularity: str = "turn", codec: Codec | None = None, max_turn_tokens: int | None = None,
         **kwargs: Any) -> CogymEnv | TokenLevelEnv:
    """A new instance of game ``id``; ``kwargs`` override the registered defaults.

    ``granularity="token"`` returns the game wrapped in :class:`~cogym.envs.token_level.TokenLevelEnv`
    (one token id per step; ``codec`` turns text into ids, a byte codec by default;
    ``max_turn_tokens`` bounds one message).
    """
    reg = _lookup(id)
    _check_arguments(reg, kwargs)
    env = reg.entry_point(**{**reg.default_kwargs, **kwargs})
    if not isinstance(env, CogymEnv):
        raise TypeError(f"the entry point of {id!r} returned a {type(env).__name__}, not a CogymEnv")
    env.made_with = (id, dict(kwargs))  # what a report of the game's failure reproduces it with
    return wrap(env, granularity, codec=codec, max_turn_tokens=max_turn_tokens)


def registered() -> dict[str, Registration]:
    """Every registered game id and its registration (a copy: editing it changes nothing)."""
    _register_builtin()
    return dict(_REGISTRY)


def scripted_strategies(id: str) -> dict[str, dict[str, ScriptedFn]]:
    """The scripted twins of game ``id``: role -> strategy name -> ``fn(observation_text, rng)``."""
    return {role: dict(fns) for role, fns in _lookup(id).scripted.items()}
