"""Typed experiment configuration: dataclasses loaded from YAML with dotted overrides.

``load_config("configs/proposer_solver.yaml", ["learners.solver.lr=1e-4"])`` returns a
:class:`Config`. Unknown keys, wrong types and impossible combinations fail at load time with a
:class:`ConfigError` whose one-line message says what is wrong, where, and how to fix it.
``load_config(None)`` loads the shipped default config (``proposer_solver.yaml``).
"""

from __future__ import annotations

import dataclasses
import difflib
import keyword
import math
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import yaml

from cogym.agents.backends import BACKENDS as GENERATION_BACKENDS
from cogym.agents.backends.vllm import VLLM_EXTRA, vllm_available
from cogym.agents.lora import LoraConfig, peft_available
from cogym.agents.policy import DTYPES, SamplingParams, attention_implementations
from cogym.core.errors import ConfigError
from cogym.envs.token_level import GRANULARITIES
from cogym.learners.advantages import WHITEN_MODES
from cogym.learners.algorithms import FROZEN, registry
from cogym.learners.config import LearnerConfig, UnknownKey, split_keys
from cogym.learners.engines import ENGINES as ENGINE_CLASSES
from cogym.learners.learner import DYNAMIC_SAMPLING
from cogym.learners.losses import KL_KINDS, LOSS_AGG_MODES

from cogym.runners.rollout.agents import twin_name
from cogym.runners.config.modules import import_game_modules

DEFAULT_CONFIG = "proposer_solver.yaml"




@dataclass
class GenerationConfig:
    """What generates a policy's turns (:mod:`cogym.agents.backends`). ``backend``: ``hf`` (the policy's
    transformers model, in process) or ``vllm`` (a vLLM engine with its own copy of the weights, refreshed
    after every update; the ``vllm`` extra). ``vllm``: ``vllm.LLM`` engine arguments, e.g.
    ``{gpu_memory_utilization: 0.4, max_num_seqs: 256}``."""

    backend: str = "hf"
    vllm: dict = field(default_factory=dict)


@dataclass
class PolicyConfig:
    """A model behind one or more seats. ``model`` is an HF directory path, a Hub id in the local
    cache, or ``tiny``.

    ``lora.r > 0``: the policy is a LoRA adapter named after it; LoRA policies with the same
    ``model`` share one base model in memory (frozen), each training only its own adapter.
    ``dtype`` (float32 | bfloat16 | float16, or fp32 | bf16 | fp16), ``attn_implementation``
    (transformers' kernel name; null: its default) and ``gradient_checkpointing`` apply to every copy
    of the model: generation, the training forward, the KL reference, the PPO critic and the PRIME PRM.
    Training keeps float32 master weights (and loss scaling for float16) in either engine.
    """

    model: str = "tiny"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    lora: LoraConfig = field(default_factory=LoraConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    dtype: str = "float32"
    attn_implementation: Optional[str] = None
    gradient_checkpointing: bool = False

    def load_options(self) -> dict:
        """The keyword arguments of ``Policy.from_pretrained`` (and ``LoraBase``) these settings make."""
        return dict(dtype=self.dtype, attn_implementation=self.attn_implementation,
                    gradient_checkpointing=self.gradient_checkpointing)


@dataclass
class PromptConfig:
    """Per-role instructions, rendered as the system message by the policy's chat template."""

    system: str = ""


@dataclass
class GameConfig:
    id: str = "proposer_solver-v0"
    num_games: int = 16  # games alive at once in one rollout
    # Episodes per group: num_games / group_size distinct seeds, each played group_size times, and a role's
    # turns in those episodes form one group (GRPO/RLOO's "n samples per prompt" for a role whose first
    # observation depends only on the seed, e.g. the generator of generator_verifier-v0). 1: group by episode.
    group_size: int = 1
    kwargs: dict = field(default_factory=dict)
    granularity: str = "turn"  # "turn": one message per step; "token": one token per step (KV caches reused)
    max_turn_tokens: int = 0  # token level: longest message; 0 = max(64, the policies' max_new_tokens)
    modules: list = field(default_factory=list)  # Python modules or .py files to import first (they register games)
    # A game that raises while it is played: "stop" the run with a report naming the game, seed, seat and
    # move (a checkpoint keeps it resumable); "skip" drops that game from its rollout and counts it
    # (rollout/game_errors; each one written to game_errors.jsonl in the run directory).
    on_error: str = "stop"
    # What game.group_size's groups are: "seed" (the games that played one seed, a role's turns in them) or
    # "prompt" (a role's seats whose first prompt of the game was the same ids). Seeds are GRPO's "n answers
    # to a prompt" only when the role's first prompt depends on the seed alone; <policy>/mixed_prompt_groups
    # counts groups whose seats saw different prompts.
    group_by: str = "seed"


@dataclass
class EvalConfig:
    heldout: bool = True  # greedy solver accuracy on the fixed held-out set, before and after
    size: int = 500
    max_new_tokens: int = 8
    batch_size: int = 500  # prompts per generate call of the held-out evaluation (lower it for a real model)
    # > 0: also heldout_sampled_acc, the mean accuracy of `samples` answers a problem sampled at this temperature
    temperature: float = 0.0
    samples: int = 4
    # name -> {kind: <evaluator>, ...its fields}: more evaluations (cogym.runners.evaluation.evaluators), e.g.
    # vs_nash: {kind: vs_scripted, opponent: nash, games: 200}
    evaluators: dict = field(default_factory=dict)


@dataclass
class RunConfig:
    name: str = "run"
    out_dir: str = "runs"
    seed: int = 0
    iterations: int = 60
    checkpoint_every: int = 20
    eval_every: int = 0  # 0: held-out accuracy only before and after training
    tensorboard: bool = True
    plot: bool = True
    threads: int = 0  # torch intra-op threads; 0: torch's default at turn level, 1 at token level
    backend: str = "local"  # where rollouts run: "local" (this process, or --nproc ranks) or "ray" (see ray.*)
    # "off": each rollout uses the newest weights; "one_step": iteration i+1's rollout overlaps
    # iteration i's update (weights one version behind; ray only). Written ``run.async`` in YAML.
    async_: str = "off"
    # transcripts.jsonl (and TensorBoard text): the full messages of the first transcripts_games games of
    # iteration 1, every transcripts_every-th iteration and the last (0: none); `cogym show RUN` prints them
    transcripts_every: int = 10
    transcripts_games: int = 2


BACKENDS = ("local", "ray")
ASYNC_MODES = ("off", "one_step")
PLACEMENTS = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")  # Ray placement group strategies
LEARNER_PLACES = ("driver", "colocated", "separate")  # ray.learners
WEIGHT_SYNCS = ("auto", "object_store")  # ray.weight_sync


@dataclass
class RayConfig:
    """Rollouts on Ray (``run.backend: ray``, :mod:`cogym.runners.ray.rollout`): the driver keeps the
    loop, ``num_rollout_workers`` actors play shares of every iteration's games, and the learners run
    in the driver or (``learners``) in actors of their own."""

    address: Optional[str] = None  # null (or "local"): start a local cluster; "auto": the one `ray start` runs here; or "host:port"
    num_rollout_workers: int = 2
    num_cpus: float = 1.0  # per rollout worker
    num_gpus: float = 0.0  # per rollout worker
    max_restarts: int = 3  # per worker: a killed worker is restarted and its share of games replayed
    max_staleness: int = 1  # run.async one_step: the most updates a rollout's weights may lag the learner
    # null: Ray places each worker where it fits; PACK / SPREAD / STRICT_PACK / STRICT_SPREAD: the
    # workers form one placement group (a bundle of num_cpus/num_gpus each) with that strategy.
    placement: Optional[str] = None
    start_timeout_s: float = 300.0  # workers must be placed and started (a dead one restarted) within this, or the run stops
    # Where the learners run: "driver" (the cogym train process); "colocated": an actor per trained
    # policy in a rollout worker's placement bundle, sharing its CPUs and GPUs (in sync mode they take
    # turns); "separate": an actor per trained policy in a bundle of its own (learner_num_cpus/gpus).
    learners: str = "driver"
    learner_num_cpus: float = 1.0  # per learner actor, learners: separate
    learner_num_gpus: float = 0.0  # per learner actor, learners: separate
    # How the driver's weights reach the workers: "auto": through shared memory for workers on the
    # driver's machine, the object store for the others; "object_store": the object store for all.
    weight_sync: str = "auto"


LEAGUE_SAMPLING = ("uniform", "pfsp")


@dataclass
class LeagueConfig:
    """Self-play against past selves (:mod:`cogym.runners.train.league`); ``seats`` empty = off.

    The seats (or roles) in ``seats`` are played, in each game, by a snapshot of ``policy`` drawn from
    the league (``uniform``, or ``pfsp``: weight ``(1 - p_win)^pfsp_power``, ``p_win`` the learner's
    win rate against that snapshot with a +1/+2 prior); with probability ``latest_prob`` a game is
    plain self-play (the current policy in those seats, and its turns there train). A snapshot is
    added every ``every`` iterations (the initial weights are the first); ``size`` > 0 keeps only the
    most recent ``size``.
    """

    seats: list = field(default_factory=list)  # seat or role names played by league opponents
    policy: str = ""  # the trained policy whose past selves form the league; "": the policy of those seats
    every: int = 10
    size: int = 0
    sampling: str = "uniform"
    pfsp_power: float = 1.0
    latest_prob: float = 0.0


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    game: GameConfig = field(default_factory=GameConfig)
    seats: dict = field(default_factory=dict)  # role or seat name -> policy id
    policies: dict = field(default_factory=dict)  # policy id -> PolicyConfig
    learners: dict = field(default_factory=dict)  # policy id -> LearnerConfig
    prompts: dict = field(default_factory=dict)  # role -> PromptConfig
    eval: EvalConfig = field(default_factory=EvalConfig)
    league: LeagueConfig = field(default_factory=LeagueConfig)
    ray: RayConfig = field(default_factory=RayConfig)

    def to_dict(self) -> dict:
        """Plain data, as YAML writes it (a learner's keys flat, as load_config reads them back)."""
        out = dataclasses.asdict(dataclasses.replace(self, learners={}))
        out["learners"] = {pid: lc.flat() for pid, lc in self.learners.items()}
        out["run"] = {_yaml_key(k): v for k, v in out["run"].items()}
        return out


def _yaml_key(field_name: str) -> str:
    """A field named after a Python keyword (``async_``) is written without its underscore."""
    return field_name[:-1] if field_name.endswith("_") and keyword.iskeyword(field_name[:-1]) else field_name


# Mappings whose values are themselves typed sections (learners: see _build_learner).
_TYPED_MAPS = {"policies": PolicyConfig, "prompts": PromptConfig}


def algorithm_choices(per_role: bool = False) -> tuple[str, ...]:
    """The registered algorithms (those that can train one role, with ``per_role``), and frozen."""
    names = tuple(n for n in registry.names() if not per_role or registry.get(n).per_role)
    return names if per_role else (*names, FROZEN)


# The shipped choices (a user module in game.modules may register more).
ESTIMATORS = algorithm_choices(per_role=True)  # also allowed per role (role_algorithms)
ALGORITHMS = algorithm_choices()
ENGINES = tuple(ENGINE_CLASSES)
KL_REWARD = ("off", *(k for k in KL_KINDS if not k.endswith("+")))
KL_LOSS = ("off", *(k for k in KL_KINDS if k not in ("k1", "abs")))  # k1/abs have no useful gradient in a loss
WHITEN = WHITEN_MODES


def _suggest(key: str, options) -> str:
    close = difflib.get_close_matches(key, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(sorted(options))})"


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], where)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be an integer, got {value!r} ({type(value).__name__})")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where} must be a number, got {value!r} ({type(value).__name__})")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where} must be a string, got {value!r} ({type(value).__name__})")
    if tp is list or origin is list:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    if tp is dict or origin is dict:
        if isinstance(value, dict):
            return dict(value)
        raise ConfigError(f"{where} must be a mapping, got {value!r}")
    return value


def _build(cls: type, data: Any, where: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'the config'} must be a mapping of keys to values, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and keyword.iskeyword(key) and f"{key}_" in names:
            key = f"{key}_"  # run.async -> RunConfig.async_
        if key not in names:
            raise ConfigError(f"unknown config key {path!r}{_suggest(str(key), names)}")
        if not where and key in _TYPED_MAPS:
            if not isinstance(value, dict):
                raise ConfigError(f"{path} must be a mapping of names to sections, got {value!r}")
            kwargs[key] = {str(k): _build(_TYPED_MAPS[key], v, f"{path}.{k}") for k, v in value.items()}
        else:
            kwargs[key] = _coerce(value, hints[key], path)
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a section's own validation (e.g. SamplingParams)
        msg = str(exc)
        # "max_new_tokens must be >= 1" -> "policies.solver.sampling.max_new_tokens must be >= 1"
        sep = "." if msg.split(" ", 1)[0] in names else ": "
        raise ConfigError(f"{where or 'config'}{sep}{msg}") from exc


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {dotted!r}: {p!r} is a value, not a section")
        node = nxt
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.path=value, e.g. learners.solver.lr=1e-4")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {text!r} has an empty key part; write it like learners.solver.lr=1e-4")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({exc.problem})") from exc
    return key, value


def _drop_null_seats(tree: dict) -> None:
    """``seats.<role>: null`` (in a file or as the override ``seats.proposer=null``) removes the seat, the
    role's prompt, and any policy (with its learner) that no seat plays any more."""
    seats = tree.get("seats")
    if not isinstance(seats, dict):
        return
    dropped = [name for name, pid in seats.items() if pid is None]
    if not dropped:
        return
    for name in dropped:
        del seats[name]
        if isinstance(tree.get("prompts"), dict):
            tree["prompts"].pop(name, None)
    played = {pid for pid in seats.values() if isinstance(pid, str)}
    for section in ("policies", "learners"):
        if isinstance(tree.get(section), dict):
            for pid in [p for p in tree[section] if p not in played]:
                del tree[section][pid]


def default_config_path() -> Path:
    return Path(str(resources.files("cogym.configs").joinpath(DEFAULT_CONFIG)))


def _module_path(module: str, config_path: Path) -> str:
    """A ``.py`` game module as an absolute path: relative to the working directory, else to the config
    file (found next to it wherever the command runs). Absolute, so the run's saved config.yaml imports it
    from any directory (``cogym train --resume``). Dotted module names, and files found nowhere (the
    import names them), are kept as written."""
    if not module.endswith(".py") or Path(module).is_absolute():
        return module
    for candidate in (Path(module), config_path.parent / module):
        if candidate.is_file():
            return str(candidate.resolve())
    return module


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config (the shipped default when ``path`` is None) and apply dotted overrides."""
    path = default_config_path() if path is None else Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; pass a YAML file such as configs/proposer_solver.yaml")
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(tree, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level, got {type(tree).__name__}")
    for text in overrides or []:
        key, value = parse_override(text)
        _set_dotted(tree, key, value)
    _drop_null_seats(tree)
    learners = tree.pop("learners", None)
    if learners is not None and not isinstance(learners, dict):
        raise ConfigError(f"learners must be a mapping of names to sections, got {learners!r}")
    cfg = _build(Config, tree, "")
    cfg.game.modules = [_module_path(m, path) for m in cfg.game.modules]
    import_game_modules(cfg.game.modules)  # they may register the algorithms the learners name
    cfg.learners = {str(pid): _build_learner(data, f"learners.{pid}") for pid, data in (learners or {}).items()}
    validate(cfg)
    return cfg


def _build_learner(data: Any, where: str) -> LearnerConfig:
    """A learner from its flat keys: the common ones typed into LearnerConfig, the others into the
    config of the algorithm that declares them (an unknown key names the closest known one)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping of keys to values, got {data!r}")
    if "algorithm" in data:
        _check_choice(_coerce(data["algorithm"], str, f"{where}.algorithm"), algorithm_choices(), f"{where}.algorithm")
    for role, name in _coerce(data.get("role_algorithms") or {}, dict, f"{where}.role_algorithms").items():
        _check_choice(_coerce(name, str, f"{where}.role_algorithms.{role}"), algorithm_choices(per_role=True),
                      f"{where}.role_algorithms.{role}")
    try:
        common, parts = split_keys(data)
    except UnknownKey as exc:
        raise ConfigError(f"unknown config key {f'{where}.{exc.key}'!r} ({exc.hint})") from None
    lc = _build(LearnerConfig, common, where)
    lc.algorithm_configs = {name: _build(registry.get(name).Config, keys, where) for name, keys in parts.items()}
    return lc


def _check_choice(value: str, options: tuple, where: str) -> None:
    if value not in options:
        raise ConfigError(f"{where} must be one of {', '.join(options)}; got {value!r}{_suggest(value, options)}")


def _check_learner_plugins(cfg: Config, pid: str, lc: LearnerConfig, where: str) -> None:
    """DAPO dynamic sampling and overlong shaping, then each algorithm's own config (it validates itself)."""
    _check_choice(lc.dynamic_sampling, DYNAMIC_SAMPLING, f"{where}.dynamic_sampling")
    low, high = lc.dynamic_sampling_low, lc.dynamic_sampling_high
    if low is not None and high is not None and not low <= high:
        raise ConfigError(f"{where}: dynamic_sampling_low must be <= dynamic_sampling_high, got "
                          f"{lc.dynamic_sampling_low} and {lc.dynamic_sampling_high}")
    if lc.max_sampling_rounds < 1:
        raise ConfigError(f"{where}.max_sampling_rounds must be >= 1 (rollouts per iteration, the first included), "
                          f"got {lc.max_sampling_rounds}")
    max_new = cfg.policies[pid].sampling.max_new_tokens
    if not 0 <= lc.overlong_buffer <= max_new:
        raise ConfigError(f"{where}.overlong_buffer must be in [0, policies.{pid}.sampling.max_new_tokens = {max_new}] "
                          f"(0: off), got {lc.overlong_buffer}")
    if not (math.isfinite(lc.overlong_penalty) and lc.overlong_penalty >= 0):
        raise ConfigError(f"{where}.overlong_penalty must be >= 0, got {lc.overlong_penalty}")
    for name in lc.algorithm_names():
        try:
            lc.settings(name).validate(lc)
        except ValueError as exc:
            msg = str(exc)
            keys = {f.name for f in dataclasses.fields(lc.settings(name))}
            sep = "." if msg.split(" ", 1)[0] in keys else f": {name}: " if not msg.startswith(name) else ": "
            raise ConfigError(f"{where}{sep}{msg}") from None


def _check_precision(pid: str, pol: PolicyConfig) -> None:
    """policies.<id>.dtype and attn_implementation name things that exist."""
    _check_choice(str(pol.dtype).lower(), tuple(DTYPES), f"policies.{pid}.dtype")
    if pol.attn_implementation is not None:
        _check_choice(pol.attn_implementation, tuple(attention_implementations()),
                      f"policies.{pid}.attn_implementation (null: transformers' default)")


def _check_lora(cfg: Config, pid: str, pol: PolicyConfig) -> None:
    """policies.<id>.lora: peft installed, a usable adapter name, and an engine that leaves the shared base whole."""
    if not pol.lora.enabled:
        return
    where = f"policies.{pid}.lora"
    if not peft_available():
        raise ConfigError(f"{where}.r > 0 needs the peft package: pip install peft (or pip install 'cogym[lora]'), "
                          f"or set {where}.r: 0")
    if "." in pid or pid in "lora_":
        raise ConfigError(f"{where}: the adapter is named after the policy, and {pid!r} cannot name a peft adapter "
                          "(no dots, and not a part of 'lora_'); rename the policy")
    lc = cfg.learners[pid]
    if lc.engine == "deepspeed" and lc.zero_stage == 3:
        raise ConfigError(f"{where}: ZeRO-3 would partition the frozen base model that LoRA adapters share (and that is "
                          f"their KL reference); set learners.{pid}.zero_stage to 0, 1 or 2 or learners.{pid}.engine: "
                          "torch (only the adapter has optimizer state, so ZeRO-3 saves little)")
    for other, opc in cfg.policies.items():
        if other != pid and opc.lora.enabled and opc.model == pol.model and opc.load_options() != pol.load_options():
            raise ConfigError(f"policies.{pid} and policies.{other} are LoRA adapters on one shared base model "
                              f"{pol.model!r}, so their dtype, attn_implementation and gradient_checkpointing must be "
                              f"equal ({pol.load_options()} vs {opc.load_options()})")


def _check_generation(cfg: Config, pid: str, pol: PolicyConfig) -> None:
    """policies.<id>.generation: a known backend, installed, and a setup it supports."""
    where = f"policies.{pid}.generation"
    _check_choice(pol.generation.backend, GENERATION_BACKENDS, f"{where}.backend")
    if pol.generation.backend != "vllm":
        if pol.generation.vllm:
            raise ConfigError(f"{where}.vllm sets engine arguments, but {where}.backend is "
                              f"{pol.generation.backend!r}; set {where}.backend: vllm or drop {where}.vllm")
        return
    if not vllm_available():
        raise ConfigError(f"{where}.backend: vllm needs vLLM, which is not installed: {VLLM_EXTRA}")
    if pol.lora.enabled:
        raise ConfigError(f"{where}.backend: vllm generates with full models; policies.{pid} is a LoRA adapter "
                          f"(policies.{pid}.lora.r > 0), so set {where}.backend: hf")
    if cfg.game.granularity == "token":
        raise ConfigError(f"{where}.backend: vllm answers whole turns; game.granularity: token steps the policy's "
                          "own model token by token, so use game.granularity: turn")
    if cfg.run.backend == "ray":
        raise ConfigError(f"{where}.backend: vllm is not supported with run.backend: ray yet (each rollout worker "
                          "would start its own engine); use run.backend: local")
    if pol.sampling.top_k or pol.sampling.top_p < 1:
        raise ConfigError(f"{where}.backend: vllm samples without top_k/top_p (vLLM's log-probs would then be of the "
                          f"filtered distribution); set policies.{pid}.sampling.top_k: 0 and top_p: 1")


def league_policy(cfg: Config) -> str:
    """The policy whose past selves form the league: ``league.policy``, else the one policy the league
    seats name in ``seats``, else the only trained policy; ConfigError when none of these decides."""
    lg = cfg.league
    if lg.policy:
        return lg.policy
    named = {cfg.seats[s] for s in lg.seats if s in cfg.seats}
    if len(named) == 1 and len(lg.seats) == sum(s in cfg.seats for s in lg.seats):
        return named.pop()
    trained = [pid for pid, lc in cfg.learners.items() if lc.algorithm != "frozen"]
    if len(trained) == 1:
        return trained[0]
    raise ConfigError(f"league.policy: cannot tell whose past selves form the league (trained policies: "
                      f"{', '.join(trained) or 'none'}); set league.policy to one of them")


def _check_league(cfg: Config) -> None:
    """league.*: values in range and a trained, full-model policy (seats are checked against the game in build)."""
    lg = cfg.league
    if not lg.seats:
        if lg != LeagueConfig():
            raise ConfigError("league: league.seats is empty, so the league is off and the other league.* keys do "
                              "nothing; name the seats its opponents play, e.g. league.seats=[second]")
        return
    if len(set(lg.seats)) != len(lg.seats):
        raise ConfigError(f"league.seats names a seat twice: {lg.seats}")
    _check_choice(lg.sampling, LEAGUE_SAMPLING, "league.sampling")
    if lg.every < 1:
        raise ConfigError(f"league.every must be >= 1 (iterations between snapshots), got {lg.every}")
    if lg.size < 0:
        raise ConfigError(f"league.size must be >= 0 (most recent snapshots kept; 0 = all), got {lg.size}")
    if not (math.isfinite(lg.pfsp_power) and lg.pfsp_power >= 0):
        raise ConfigError(f"league.pfsp_power must be >= 0 (0 = uniform), got {lg.pfsp_power}")
    if not 0 <= lg.latest_prob < 1:
        raise ConfigError(f"league.latest_prob must be in [0, 1) (the share of plain self-play games; 1 would never "
                          f"play the league), got {lg.latest_prob}")
    pid = league_policy(cfg)
    if pid not in cfg.policies and not lg.policy:
        raise ConfigError(f"league.seats: seats gives them to {pid!r}; the league plays past selves of a trained policy "
                          f"there, so seat that policy (e.g. seats.{lg.seats[0]}=<policy>) or set league.policy")
    if pid not in cfg.policies:
        raise ConfigError(f"league.policy names policy {pid!r}, which is not under policies "
                          f"(defined: {', '.join(cfg.policies) or 'none'})")
    lc = cfg.learners[pid]
    if lc.algorithm == "frozen":
        raise ConfigError(f"league.policy {pid!r} is frozen, so every snapshot would be the same model; name a "
                          "trained policy (or drop league.seats and seat a frozen copy directly)")
    if cfg.policies[pid].lora.enabled:
        raise ConfigError(f"league.policy {pid!r} is a LoRA adapter; leagues snapshot full models only (set "
                          f"policies.{pid}.lora.r: 0)")
    if lc.engine == "deepspeed" and lc.zero_stage == 3:
        raise ConfigError(f"league.policy {pid!r} trains with ZeRO-3, whose partitioned weights a snapshot cannot "
                          f"copy; use learners.{pid}.zero_stage 1 or 2")
    reserved = [p for p in cfg.policies if p.startswith("league:")]
    if reserved:
        raise ConfigError(f"policies: ids starting with 'league:' name league members; rename {reserved[0]!r}")


def _check_learner(cfg: Config, pid: str, lc: LearnerConfig, where: str) -> None:
    """learners.<id>: common keys in range and consistent, then the plug-ins' own checks."""
    if pid not in cfg.policies:
        raise ConfigError(f"{where} trains policy {pid!r}, which is not under policies")
    _check_choice(lc.algorithm, algorithm_choices(), f"{where}.algorithm")
    for role, name in lc.role_algorithms.items():
        _check_choice(name, algorithm_choices(per_role=True), f"{where}.role_algorithms.{role}")
    _check_choice(lc.engine, ENGINES, f"{where}.engine")
    _check_choice(lc.kl_in_reward, KL_REWARD, f"{where}.kl_in_reward")
    if lc.kl_in_loss == "k1":
        raise ConfigError(f"{where}.kl_in_loss: k1 has zero expected gradient in the loss (docs/algorithms.md §3.1); "
                          "use k2 (reverse KL) or k3, or put k1 in the reward with kl_in_reward: k1")
    _check_choice(lc.kl_in_loss, KL_LOSS, f"{where}.kl_in_loss")
    _check_choice(lc.loss_agg, LOSS_AGG_MODES, f"{where}.loss_agg")
    for name in ("lr", "max_grad_norm", "clip_low", "clip_high", "kl_reward_coef", "kl_loss_coef",
                 "entropy_coef", "weight_decay"):
        if not math.isfinite(getattr(lc, name)):
            raise ConfigError(f"{where}.{name} must be a finite number, got {getattr(lc, name)}")
    if lc.max_grad_norm <= 0:
        raise ConfigError(f"{where}.max_grad_norm must be > 0 (gradients are clipped to this norm), got {lc.max_grad_norm}")
    _check_learner_plugins(cfg, pid, lc, where)
    try:
        lc.check_ref_sync()
    except ValueError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    if lc.ref_sync_every and cfg.policies[pid].lora.enabled:
        raise ConfigError(f"{where}.ref_sync_every: a LoRA policy's KL reference is its base model with the adapter "
                          "off, shared with the policy, so it cannot move; use ref_sync_every: 0")
    if lc.offload_optimizer and lc.zero_stage < 1:
        raise ConfigError(f"{where}.offload_optimizer needs zero_stage >= 1 (ZeRO-Offload partitions the optimizer)")
    if lc.offload_params and lc.zero_stage != 3:
        raise ConfigError(f"{where}.offload_params needs zero_stage: 3 (only ZeRO-3 partitions parameters)")
    if lc.zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"{where}.zero_stage must be 0, 1, 2 or 3, got {lc.zero_stage}")
    if lc.engine == "torch" and (lc.zero_stage or lc.offload_optimizer or lc.offload_params):
        raise ConfigError(f"{where}: zero_stage/offload need engine: deepspeed (the torch engine has no ZeRO)")
    if lc.lr <= 0 and lc.algorithm != "frozen":
        raise ConfigError(f"{where}.lr must be > 0, got {lc.lr}")
    if lc.micro_batch_size < 1 or lc.epochs < 1:
        raise ConfigError(f"{where}: micro_batch_size and epochs must be >= 1")
    if lc.max_tokens_per_micro_batch is not None and lc.max_tokens_per_micro_batch < 1:
        raise ConfigError(f"{where}.max_tokens_per_micro_batch must be >= 1 (padded tokens a forward), or null for "
                          f"no token limit; got {lc.max_tokens_per_micro_batch}")
    if not 0 <= lc.clip_low < 1 or lc.clip_high < 0:
        raise ConfigError(f"{where}: clip_low must be in [0, 1) and clip_high >= 0, got {lc.clip_low}/{lc.clip_high}")
    if lc.dual_clip is not None and not (math.isfinite(lc.dual_clip) and lc.dual_clip > 1):
        raise ConfigError(f"{where}.dual_clip must be > 1 or null (off), got {lc.dual_clip}")
    if lc.loss_agg in ("seq-mean-token-sum-norm", "dr_grpo") and lc.norm_const is None:
        raise ConfigError(f"{where}.norm_const is required with loss_agg {lc.loss_agg!r}: "
                          "set it to the maximum response length")
    if lc.norm_const is not None and not (math.isfinite(lc.norm_const) and lc.norm_const > 0):
        raise ConfigError(f"{where}.norm_const must be > 0 (the maximum response length), got {lc.norm_const}")


def validate(cfg: Config) -> None:
    """Cross-field checks: every seat has a policy, every policy a learner, values in range."""
    if cfg.run.seed < 0:
        raise ConfigError(f"run.seed must be >= 0, got {cfg.run.seed}")
    if cfg.run.threads < 0:
        raise ConfigError(f"run.threads must be >= 0 (0: automatic), got {cfg.run.threads}")
    if cfg.run.iterations < 1:
        raise ConfigError(f"run.iterations must be >= 1, got {cfg.run.iterations}")
    if cfg.run.checkpoint_every < 0:
        raise ConfigError(f"run.checkpoint_every must be >= 0 (0 disables), got {cfg.run.checkpoint_every}")
    if cfg.run.eval_every < 0:
        raise ConfigError(f"run.eval_every must be >= 0 (0: only before and after), got {cfg.run.eval_every}")
    if cfg.run.transcripts_every < 0:
        raise ConfigError(f"run.transcripts_every must be >= 0 (0: no transcripts), got {cfg.run.transcripts_every}")
    if cfg.run.transcripts_games < 0:
        raise ConfigError(f"run.transcripts_games must be >= 0 (games kept per iteration), got {cfg.run.transcripts_games}")
    if cfg.eval.size < 1 or cfg.eval.max_new_tokens < 1 or cfg.eval.batch_size < 1 or cfg.eval.samples < 1:
        raise ConfigError(f"eval.size, eval.max_new_tokens, eval.batch_size and eval.samples must be >= 1, got "
                          f"{cfg.eval.size}, {cfg.eval.max_new_tokens}, {cfg.eval.batch_size} and {cfg.eval.samples}")
    if not (math.isfinite(cfg.eval.temperature) and cfg.eval.temperature >= 0):
        raise ConfigError(f"eval.temperature must be >= 0 (0: greedy accuracy only), got {cfg.eval.temperature}")
    if cfg.game.num_games < 1:
        raise ConfigError(f"game.num_games must be >= 1, got {cfg.game.num_games}")
    if cfg.game.group_size < 1 or cfg.game.num_games % cfg.game.group_size:
        raise ConfigError(f"game.group_size must be >= 1 and divide game.num_games = {cfg.game.num_games}, "
                          f"got {cfg.game.group_size}")
    _check_choice(cfg.game.granularity, GRANULARITIES, "game.granularity")
    _check_choice(cfg.game.on_error, ("stop", "skip"), "game.on_error")
    _check_choice(cfg.game.group_by, ("seed", "prompt"), "game.group_by")
    if cfg.game.max_turn_tokens < 0:
        raise ConfigError(f"game.max_turn_tokens must be >= 0 (0: the policies' max_new_tokens), got {cfg.game.max_turn_tokens}")
    if cfg.game.max_turn_tokens and cfg.game.granularity != "token":
        raise ConfigError("game.max_turn_tokens only applies with game.granularity: token; at turn level "
                          "policies.<id>.sampling.max_new_tokens bounds a message")
    if not cfg.seats:
        raise ConfigError("seats is empty; map each role to a policy, e.g. seats: {solver: solver}")
    for seat, pid in cfg.seats.items():
        if not isinstance(pid, str):
            raise ConfigError(f"seats.{seat} must be a policy id (a string), got {pid!r}")
        if twin_name(pid) is not None:
            continue  # a scripted twin of the game's role; checked against the game when built
        if pid not in cfg.policies:
            raise ConfigError(f"seats.{seat} names policy {pid!r}, which is not under policies "
                              f"(defined: {', '.join(cfg.policies) or 'none'})")
    for pid, pol in cfg.policies.items():
        if pid not in cfg.learners:
            raise ConfigError(f"policy {pid!r} has no learner; add learners.{pid} (use algorithm: frozen to keep it fixed)")
        if pol.sampling.max_new_tokens < 1:
            raise ConfigError(f"policies.{pid}.sampling.max_new_tokens must be >= 1, got {pol.sampling.max_new_tokens}")
        if not 0 < pol.sampling.top_p <= 1 or pol.sampling.top_k < 0:
            raise ConfigError(f"policies.{pid}.sampling: top_p must be in (0, 1] and top_k >= 0 (0 = off), "
                              f"got {pol.sampling.top_p} and {pol.sampling.top_k}")
        if pol.sampling.temperature <= 0:
            raise ConfigError(f"policies.{pid}.sampling.temperature must be > 0 for training rollouts, "
                              f"got {pol.sampling.temperature}")
        _check_precision(pid, pol)
        _check_lora(cfg, pid, pol)
        _check_generation(cfg, pid, pol)
    for pid, lc in cfg.learners.items():
        _check_learner(cfg, pid, lc, f"learners.{pid}")
    _check_league(cfg)
    _check_ray(cfg)


def _check_ray(cfg: Config) -> None:
    """run.backend, run.async and ray.*: known values in range, and what the Ray rollout supports."""
    _check_choice(cfg.run.backend, BACKENDS, "run.backend")
    _check_choice(cfg.run.async_, ASYNC_MODES, "run.async")
    rc = cfg.ray
    if rc.address in ("", "local"):
        rc.address = None  # Ray's own word for a new local cluster: cogym's null
    if cfg.run.backend != "ray":
        if cfg.run.async_ != "off":
            raise ConfigError("run.async: one_step overlaps a rollout on Ray workers with the update in the driver; "
                              "set run.backend: ray (or pass --ray)")
        return
    if rc.num_rollout_workers < 1:
        raise ConfigError(f"ray.num_rollout_workers must be >= 1, got {rc.num_rollout_workers}")
    if rc.num_rollout_workers > cfg.game.num_games:
        raise ConfigError(f"ray.num_rollout_workers ({rc.num_rollout_workers}) exceeds game.num_games "
                          f"({cfg.game.num_games}): a worker would have no game to play")
    if rc.num_cpus <= 0 or rc.num_gpus < 0:
        raise ConfigError(f"ray.num_cpus must be > 0 and ray.num_gpus >= 0 (per worker), got {rc.num_cpus} and {rc.num_gpus}")
    if rc.max_restarts < 0:
        raise ConfigError(f"ray.max_restarts must be >= 0, got {rc.max_restarts}")
    if rc.placement is not None:
        _check_choice(rc.placement, PLACEMENTS, "ray.placement")
    if rc.start_timeout_s <= 0:
        raise ConfigError(f"ray.start_timeout_s must be > 0, got {rc.start_timeout_s}")
    _check_choice(rc.learners, LEARNER_PLACES, "ray.learners")
    _check_choice(rc.weight_sync, WEIGHT_SYNCS, "ray.weight_sync")
    if rc.learner_num_cpus <= 0 or rc.learner_num_gpus < 0:
        raise ConfigError(f"ray.learner_num_cpus must be > 0 and ray.learner_num_gpus >= 0 (per learner actor), "
                          f"got {rc.learner_num_cpus} and {rc.learner_num_gpus}")
    if rc.max_staleness < 1:
        raise ConfigError(f"ray.max_staleness must be >= 1 (one_step rollouts use weights one update old), "
                          f"got {rc.max_staleness}")
