"""The algorithm registry: name -> :class:`Algorithm` subclass.

The shipped algorithms are the table :data:`BUILTIN`, registered on the first lookup.
``@register("my_algo")`` on a subclass makes ``algorithm: my_algo`` work in a config; a module that
registers one is listed in ``game.modules`` (imported before the config's algorithms are checked),
the way a user's game is. Unknown names fail with a "did you mean".
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable

from cogym.core.names import did_you_mean
from cogym.core.processes import load_object, register_builtin
from cogym.learners.algorithm import Algorithm, AlgorithmConfig

FROZEN = "frozen"  # not an algorithm: the policy plays and never learns (no learner is built)

_REGISTRY: dict[str, type[Algorithm]] = {}
# The shipped algorithms, in the order names() lists them: name -> "module:class". Registered on the
# first lookup (importing these modules).
BUILTIN: dict[str, str] = {
    "grpo": "cogym.learners.algorithms.grpo:GRPO",
    "dr_grpo": "cogym.learners.algorithms.dr_grpo:DrGRPO",
    "rloo": "cogym.learners.algorithms.rloo:RLOO",
    "reinforce_pp": "cogym.learners.algorithms.reinforce_pp:ReinforcePP",
    "reinforce_pp_baseline": "cogym.learners.algorithms.reinforce_pp_baseline:ReinforcePPBaseline",
    "ppo": "cogym.learners.algorithms.ppo:PPO",
    "rae": "cogym.learners.algorithms.rae:RAE",
    "trr_pp": "cogym.learners.algorithms.trr_pp:TRRPP",
    "prime": "cogym.learners.algorithms.prime:PRIME",
    "spin": "cogym.learners.algorithms.spin:Spin",
    "sft": "cogym.learners.algorithms.sft:SFT",
    "dpo": "cogym.learners.algorithms.dpo:DPO",
    "distill": "cogym.learners.algorithms.distill:Distill",
    "grpo_passk": "cogym.learners.algorithms.grpo_passk:GRPOPassK",
    "opo": "cogym.learners.algorithms.opo:OPO",
    "gpg": "cogym.learners.algorithms.gpg:GPG",
    "otb": "cogym.learners.algorithms.otb:OTB",
    "reward_model": "cogym.learners.algorithms.reward_model:RewardModelAlgorithm",
    "pf_ppo": "cogym.learners.algorithms.pf_ppo:PFPPO",
    "vapo": "cogym.learners.algorithms.vapo:VAPO",
    "remax": "cogym.learners.algorithms.remax:ReMax",
}
_BUILTIN_LOCK = threading.RLock()
# The learner's common keys (LearnerConfig's fields), set by cogym.learners.config (reserve): an
# algorithm's own config keys must not shadow them, since a learner's YAML keys share one namespace.
_RESERVED: set[str] = set()


def _check_keys(name: str, cls: type[Algorithm]) -> None:
    clash = sorted(_RESERVED & {f.name for f in dataclasses.fields(cls.Config)})
    if clash:
        raise ValueError(f"algorithm {name!r}: config key(s) {', '.join(clash)} are common learner keys; "
                         "rename them (YAML keys of a learner share one namespace)")


def reserve(keys) -> None:
    """Make ``keys`` (the learner's common keys) unusable as an algorithm's config keys, also for the
    algorithms registered already."""
    _RESERVED.update(keys)
    for name, cls in _REGISTRY.items():
        _check_keys(name, cls)


def register(name: str) -> Callable[[type[Algorithm]], type[Algorithm]]:
    """Class decorator: register an :class:`Algorithm` subclass under ``name``.

    Refuses a name already taken (by a shipped algorithm or an earlier module), ``frozen``, a class
    that is not an Algorithm, and a config key that would shadow a common learner key.
    """
    def deco(cls: type[Algorithm]) -> type[Algorithm]:
        _register_builtin()
        return _store(name, cls)
    return deco


def _store(name: str, cls: type[Algorithm]) -> type[Algorithm]:
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise TypeError(f"@register({name!r}) decorates a subclass of cogym.learners.algorithms.Algorithm, got {cls!r}")
    if not name or not name.isidentifier() or name == FROZEN:
        raise ValueError(f"algorithm name must be a Python identifier other than {FROZEN!r}, got {name!r}")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"algorithm {name!r} is already registered (by {_REGISTRY[name].__module__}."
                         f"{_REGISTRY[name].__qualname__}); pick another name")
    if not (dataclasses.is_dataclass(cls.Config) and issubclass(cls.Config, AlgorithmConfig)):
        raise TypeError(f"{cls.__qualname__}.Config must be a dataclass subclassing AlgorithmConfig")
    _check_keys(name, cls)
    cls.name = name
    _REGISTRY[name] = cls
    return cls


def _register_builtin() -> None:
    """Register the shipped algorithms not registered yet."""
    register_builtin(_REGISTRY, BUILTIN, _BUILTIN_LOCK, lambda name, ref: _store(name, load_object(ref)))


def names() -> tuple[str, ...]:
    """Every registered algorithm, shipped ones first."""
    _register_builtin()
    return tuple(_REGISTRY)


def get(name: str) -> type[Algorithm]:
    """The algorithm registered as ``name``; ValueError with a did-you-mean otherwise."""
    _register_builtin()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        hint = did_you_mean(name, _REGISTRY)
        raise ValueError(f"unknown algorithm {name!r}{hint}; registered: {', '.join(_REGISTRY)} (and {FROZEN!r}). "
                         "A user algorithm is registered by a module listed in game.modules") from None


def unregister(name: str) -> None:
    """Remove a registration (tests; a module reloaded in one process)."""
    _REGISTRY.pop(name, None)


def one_process_only(learners: dict) -> tuple[str, str] | None:
    """The first ``(policy, algorithm)`` of ``learners`` (policy -> LearnerConfig) whose algorithm trains
    in one process only (``data_parallel`` False), or None: what data-parallel training refuses."""
    for pid, lc in learners.items():
        if lc.algorithm != FROZEN and not get(lc.algorithm).data_parallel:
            return pid, lc.algorithm
    return None
