"""Typed experiment configuration: dataclasses loaded from YAML with dotted overrides.

``load_config("configs/proposer_solver.yaml", ["learners.solver.lr=1e-4"])`` returns a
:class:`Config`. Unknown keys, wrong types and impossible combinations fail at load time with a
:class:`ConfigError` whose one-line message says what is wrong, where, and how to fix it.
``load_config(None)`` loads the shipped default config (``proposer_solver.yaml``).
"""

from __future__ import annotations

import dataclasses
import keyword
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, get_args, Literal, Optional, Union

from cogym.agents.endpoint import EndpointConfig
from cogym.agents.lora import LoraConfig
from cogym.core.names import did_you_mean
from cogym.core.types import SamplingParams
from cogym.learners.advantages import WHITEN_MODES
from cogym.learners import registry
from cogym.learners.registry import FROZEN
from cogym.learners.engines import ENGINES as ENGINE_CLASSES
from cogym.learners.losses import KL_KINDS
from cogym.runners.rollout.loop import MAX_PROMPT_CHARS

DEFAULT_CONFIG = "proposer_solver.yaml"

# A key's choices are its type: the loader refuses any other value, naming the closest choice.
Backend = Literal["local", "ray"]
AsyncMode = Literal["off", "one_step"]
OnError = Literal["stop", "skip"]
GroupBy = Literal["seed", "prompt"]
Placement = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]  # Ray placement group strategies
LearnerPlace = Literal["driver", "colocated", "separate"]
WeightSync = Literal["auto", "object_store", "collective"]
LeagueSampling = Literal["uniform", "pfsp"]
Schedule = Literal["round_robin", "gauntlet", "swiss"]
Scoring = Literal["competitive", "paired"]


@dataclass
class GenerationConfig:
    """What generates a policy's turns (:mod:`cogym.agents.backends`). ``backend``: ``hf`` (the policy's
    transformers model, in process) or ``vllm`` (a vLLM engine with its own copy of the weights, refreshed
    after every update, in each Ray rollout worker with ``--ray``; LoRA policies on one base model share
    one engine; the ``vllm`` extra, docs/vllm.md). ``vllm``: ``vllm.LLM`` engine arguments, e.g.
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

    ``endpoint``: the policy is an OpenAI-compatible chat endpoint instead of a model (frozen: no
    learner trains it; ``model``, ``lora`` and ``generation`` do not apply; ``sampling.max_new_tokens``
    and ``temperature`` are its defaults), :mod:`cogym.agents.endpoint`.
    """

    model: str = "tiny"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    lora: LoraConfig = field(default_factory=LoraConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    dtype: str = "float32"
    attn_implementation: Optional[str] = None
    gradient_checkpointing: bool = False
    endpoint: Optional[EndpointConfig] = None

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
    id: str = "proposer_solver-v0"  # the game (cogym games lists them)
    num_games: int = 16  # games alive at once in one rollout
    # Episodes per group: num_games / group_size distinct seeds, each played group_size times, and a role's
    # turns in those episodes form one group (GRPO/RLOO's "n samples per prompt" for a role whose first
    # observation depends only on the seed, e.g. the generator of generator_verifier-v0). 1: group by episode.
    group_size: int = 1
    kwargs: dict = field(default_factory=dict)  # the game's constructor arguments (its docstring lists them)
    granularity: str = "turn"  # "turn": one message per step; "token": one token per step (KV caches reused)
    max_turn_tokens: int = 0  # token level: longest message; 0 = max(64, the policies' max_new_tokens)
    modules: list = field(default_factory=list)  # Python modules or .py files to import first (they register games)
    # A game that raises while it is played: "stop" the run with a report naming the game, seed, seat and
    # move (a checkpoint keeps it resumable); "skip" drops that game from its rollout and counts it
    # (rollout/game_errors; each one written to game_errors.jsonl in the run directory).
    on_error: OnError = "stop"
    # The most characters a seat may be asked at once (its system message and the game's text, or its
    # conversation so far); a longer prompt fails its game like a contract break (on_error applies) before
    # any tokenizer or model reads it. Each game's spec.max_turns is enforced the same way.
    max_prompt_chars: int = MAX_PROMPT_CHARS
    # What game.group_size's groups are: "seed" (the games that played one seed, a role's turns in them) or
    # "prompt" (a role's seats whose first prompt of the game was the same ids). Seeds are GRPO's "n answers
    # to a prompt" only when the role's first prompt depends on the seed alone; <policy>/mixed_prompt_groups
    # counts groups whose seats saw different prompts.
    group_by: GroupBy = "seed"


@dataclass
class EvalConfig:
    declared: bool = True  # measure the evaluators the game declares (GameSpec.evaluators), before and after
    # name -> {kind: <evaluator>, ...its fields}, or null: added to the game's, or merged over (or dropping) the
    # declared one of the same name (cogym.runners.evaluation), e.g. vs_nash: {kind: vs_scripted, opponent: nash}
    evaluators: dict = field(default_factory=dict)


@dataclass
class RunConfig:
    name: str = "run"  # the run directory is <out_dir>/<name>-<time> (or --run-dir)
    out_dir: str = "runs"  # where run directories go
    seed: int = 0  # every draw of the run derives from it (core.seeding): the same seed repeats the run
    iterations: int = 60  # training iterations (one rollout and one update of every learner each)
    checkpoint_every: int = 20  # a checkpoint every N iterations and at the end (0: none); --resume continues one
    eval_every: int = 0  # run the evaluators every N iterations too (0: only before and after training)
    tensorboard: bool = True  # TensorBoard event files in the run directory
    plot: bool = True  # learning-curve PNGs in the run directory at the end
    threads: int = 0  # torch intra-op threads, pinned; 0: automatic, the cores free of other load (1 at token level)
    backend: Backend = "local"  # where rollouts run: "local" (this process, or --nproc ranks) or "ray" (see ray.*)
    # "off": each rollout uses the newest weights; "one_step": iteration i+1's rollout overlaps
    # iteration i's update (weights one version behind; ray only). Written ``run.async`` in YAML.
    async_: AsyncMode = "off"
    # transcripts.jsonl (and TensorBoard text): the full messages of the first transcripts_games games of
    # iteration 1, every transcripts_every-th iteration and the last (0: none); `cogym show RUN` prints them
    transcripts_every: int = 10
    transcripts_games: int = 2  # games kept in transcripts.jsonl per kept iteration
    # Warnings about the run itself are errors that stop it (one line): a policy that got no turns, or only
    # zero advantages, in its first iterations (`cogym train --strict` sets it)
    strict: bool = False


BACKENDS, ASYNC_MODES = get_args(Backend), get_args(AsyncMode)
PLACEMENTS, LEARNER_PLACES, WEIGHT_SYNCS = get_args(Placement), get_args(LearnerPlace), get_args(WeightSync)


@dataclass
class RayConfig:
    """Rollouts on Ray (``run.backend: ray``, :mod:`cogym.runners.ray.rollout`): the driver keeps the
    loop, ``num_rollout_workers`` actors play shares of every iteration's games, and the learners run
    in the driver or (``learners``) in actors of their own."""

    address: Optional[str] = None  # null (or "local"): start a local cluster; "auto": the one `ray start` runs here; or "host:port"
    num_rollout_workers: int = 2  # Ray actors that play the games (cogym tournament: its workers, 1 CPU each by default)
    num_cpus: float = 1.0  # per rollout worker
    num_gpus: float = 0.0  # per rollout worker
    max_restarts: int = 3  # per worker: a killed worker is restarted and its share of games replayed
    max_staleness: int = 1  # run.async one_step: the most updates a rollout's weights may lag the learner
    # null: Ray places each worker where it fits; PACK / SPREAD / STRICT_PACK / STRICT_SPREAD: the
    # workers form one placement group (a bundle of num_cpus/num_gpus each) with that strategy.
    placement: Optional[Placement] = None
    start_timeout_s: float = 300.0  # workers must be placed and started (a dead one restarted) within this, or the run stops
    # Where the learners run: "driver" (the cogym train process); "colocated": an actor per trained
    # policy in a rollout worker's placement bundle, sharing its CPUs and GPUs (in sync mode they take
    # turns); "separate": an actor per trained policy in a bundle of its own (learner_num_cpus/gpus).
    learners: LearnerPlace = "driver"
    learner_num_cpus: float = 1.0  # per learner actor, learners: separate
    learner_num_gpus: float = 0.0  # per learner actor, learners: separate
    # Actors per trained policy's learner (learners: colocated or separate): N > 1 makes a data-parallel
    # group (torch.distributed: gloo on CPU, NCCL on GPU), each actor training on its share of the rows.
    learner_workers: int = 1
    # How the driver's weights reach the workers: "auto": through shared memory for workers on the
    # driver's machine, the object store for the others; "object_store": the object store for all;
    # "collective": one broadcast from the driver or learner actor to the workers (gloo on CPU, NCCL on GPUs).
    weight_sync: WeightSync = "auto"


LEAGUE_SAMPLING = get_args(LeagueSampling)


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
    sampling: LeagueSampling = "uniform"
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
    sampling: dict = field(default_factory=dict)  # defaults of every policy's sampling (its own keys win)

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
TYPED_MAPS = {"policies": PolicyConfig, "prompts": PromptConfig}


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


def suggest(key: str, options) -> str:
    return did_you_mean(key, options) or f" (known keys: {', '.join(sorted(options))})"


def default_config_path() -> Path:
    return Path(str(resources.files("cogym.configs").joinpath(DEFAULT_CONFIG)))


def config_path(path: str | Path) -> Path:
    """``path`` as given when it is a file; else, for ``configs/<name>.yaml`` or a bare ``<name>.yaml``, the
    config of that name that ships with cogym (``cogym/configs/``), so that the commands in the docs work from
    any directory and after ``pip install``. Otherwise ``path`` unchanged (reading it names the missing file)."""
    path = Path(path)
    if path.is_file() or path.suffix not in (".yaml", ".yml"):
        return path
    if len(path.parts) == 1 or (len(path.parts) == 2 and path.parts[0] == "configs"):
        shipped = default_config_path().with_name(path.name)
        if shipped.is_file():
            return shipped
    return path


@dataclass
class TournamentSampling:
    """``sampling:`` of ``cogym tournament``: the keys of a training config's ``sampling`` its model players use."""

    max_new_tokens: int = 0  # message limit; 0: each checkpoint's run's (a model with no run takes the shared one)
    temperature: float = 1.0  # model players' sampling temperature


@dataclass
class TournamentGame:
    """``game:`` of ``cogym tournament``: the keys of a training config's ``game`` a tournament uses."""

    id: Optional[str] = None  # the game (cogym games lists them), e.g. kuhn_poker-v0; required
    kwargs: dict = field(default_factory=dict)  # the game's constructor arguments (its docstring lists them)
    modules: list[str] = field(default_factory=list)  # Python modules or .py files to import first (they register games)


@dataclass
class TournamentSection:
    """``tournament:`` of ``cogym tournament``: who plays, how pairings are scheduled and scored, where results go."""

    # checkpoints, run dirs, model dirs, tiny, scripted:<twin>, endpoint:<base_url>?model=M&...; globs; in YAML also
    # {name: N, endpoint: {base_url, model, api_key_env, ...}} (docs/tournaments.md#endpoint-players)
    players: list[Union[str, dict]] = field(default_factory=list)
    policy: Optional[str] = None  # which policy of a checkpoint plays (needed when it holds several)
    role: Optional[str] = None  # bind every player without its own @ROLE to this role (or seats): paired scoring
    sides: Any = None  # the seats of each side, [[...], [...]] (default: the game's two sides)
    fixed: dict = field(default_factory=dict)  # seat or role -> who plays it outside the sides (scripted:<twin>, a model)
    schedule: Schedule = "round_robin"  # who meets whom: every pair, a pool against the rest, or swiss rounds
    scoring: Optional[Scoring] = None  # how a pairing is scored (default: the game's; paired when players are bound)
    games_per_pairing: int = 100  # even: half the seeds, each in both seat orders
    pool: list[str] = field(default_factory=list)  # gauntlet: the fixed pool the other players face
    swiss_rounds: int = 0  # swiss: rounds (0: ceil(log2 players) + 1)
    anchor: Optional[str] = None  # the player whose rating is 0 (default: the mean rating is 0)
    seed: int = 0  # seeds of the games
    batch_games: int = 256  # games played at once
    max_loaded: int = 0  # model players held in memory at once (0: all)
    out: Optional[str] = None  # output directory (default tournaments/<game.id>); rerunning resumes it
    transcripts: int = 0  # keep the messages of the first K games of each pairing (cogym show OUT)
    backend: Backend = "local"  # where games are played: "local" (this process) or "ray" (ray.num_rollout_workers workers)


@dataclass
class TournamentConfig:
    """``cogym tournament``: its ``--config`` YAML, dotted overrides and flags set these keys (a flag wins).
    ``game``, ``sampling``, ``prompts`` and ``ray`` are the sections of a training config, with the keys a
    tournament uses."""

    tournament: TournamentSection = field(default_factory=TournamentSection)
    game: TournamentGame = field(default_factory=TournamentGame)
    sampling: TournamentSampling = field(default_factory=TournamentSampling)
    prompts: dict = field(default_factory=dict)  # role -> PromptConfig: model players' system message (over their runs')
    ray: RayConfig = field(default_factory=RayConfig)  # tournament.backend: ray: the workers that play the games


# Top-level sections whose TYPED_MAPS keys are mappings of names to typed sections.
MAP_OWNERS = (Config, TournamentConfig)
