"""Typed experiment configuration: dataclasses loaded from YAML with dotted overrides.

``load_config("configs/proposer_solver.yaml", ["learners.solver.lr=1e-4"])`` returns a
:class:`Config`. Unknown keys, wrong types and impossible combinations fail at load time with a
:class:`ConfigError` whose one-line message says what is wrong, where, and how to fix it.
``load_config(None)`` loads the shipped default config (``proposer_solver.yaml``).
"""

from __future__ import annotations

import dataclasses
import keyword
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, get_args, Literal, Optional, Union

from cogym.agents.backends import BACKENDS as GENERATION_BACKENDS
from cogym.agents.endpoint import EndpointConfig
from cogym.agents.lora import LoraConfig
from cogym.core.config_key import key, same_key
from cogym.core.names import did_you_mean
from cogym.core.types import SamplingParams
from cogym.envs.token_level import GRANULARITIES
from cogym.learners.advantages import WHITEN_MODES
from cogym.learners import registry
from cogym.learners.registry import FROZEN
from cogym.learners.engines import ENGINES as ENGINE_CLASSES
from cogym.learners.losses import KL_KINDS
from cogym.runners.rollout.loop import MAX_PROMPT_CHARS, ON_ERROR

DEFAULT_CONFIG = "proposer_solver.yaml"

# A key's choices are its type: the loader refuses any other value, naming the closest choice. Each set is
# declared here once, and the code that acts on a key imports it (SCHEDULES, SCORINGS, ...), but for a set the
# layers below the config own: the play loop's ON_ERROR (cogym.runners.rollout sits below cogym.runners.config).
Backend = Literal["local", "ray"]
AsyncMode = Literal["off", "one_step"]
OnError = Literal[ON_ERROR]
GroupBy = Literal["seed", "prompt"]
Placement = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]  # Ray placement group strategies
LearnerPlace = Literal["driver", "colocated", "separate"]
WeightSync = Literal["auto", "object_store", "collective"]
LeagueSampling = Literal["uniform", "pfsp"]
Schedule = Literal["round_robin", "gauntlet", "swiss"]
# the sign of the two sides' return difference; the players' own returns, seed by seed
Scoring = Literal["competitive", "paired"]

BACKENDS, ASYNC_MODES = get_args(Backend), get_args(AsyncMode)
PLACEMENTS, LEARNER_PLACES, WEIGHT_SYNCS = get_args(Placement), get_args(LearnerPlace), get_args(WeightSync)
LEAGUE_SAMPLING, SCHEDULES, SCORINGS = get_args(LeagueSampling), get_args(Schedule), get_args(Scoring)


@dataclass
class GenerationConfig:
    """What generates a policy's turns (:mod:`cogym.agents.backends`)."""

    backend: str = key("hf", "hf (the policy's transformers model, in process) or vllm (a vLLM engine with its own "
                       "copy of the weights, refreshed after every update, in each Ray rollout worker with --ray; LoRA "
                       "policies on one base model share one engine; the vllm extra, docs/vllm.md)",
                       choices=GENERATION_BACKENDS)
    vllm: dict = key(factory=dict, help="vllm.LLM engine arguments, e.g. {gpu_memory_utilization: 0.4, max_num_seqs: 256}")


@dataclass
class PolicyConfig:
    """A model behind one or more seats, or an OpenAI-compatible chat endpoint.

    ``lora.r > 0``: the policy is a LoRA adapter named after it; LoRA policies with the same
    ``model`` share one base model in memory (frozen), each training only its own adapter.
    ``dtype``, ``attn_implementation`` and ``gradient_checkpointing`` apply to every copy of the model:
    generation, the training forward, the KL reference, the PPO critic and the PRIME PRM.
    """

    model: str = key("tiny", "an HF directory path, a Hub id in the local cache, or tiny")
    sampling: SamplingParams = key(factory=SamplingParams, help="how its turns are sampled (over the shared sampling)")
    lora: LoraConfig = key(factory=LoraConfig, help="LoRA settings: r > 0 trains an adapter named after the policy")
    generation: GenerationConfig = key(factory=GenerationConfig, help="what generates its turns")
    dtype: str = key("float32", "float32 | bfloat16 | float16 (or fp32 | bf16 | fp16) for every copy of the model; "
                     "training keeps float32 master weights (and loss scaling for float16) in either engine")
    attn_implementation: Optional[str] = key(None, "transformers' attention kernel name for every copy of the model; "
                                             "null: its default")
    gradient_checkpointing: bool = key(False, "transformers' gradient checkpointing for every copy of the model "
                                       "(activations recomputed in the backward pass: less memory, more compute)")
    endpoint: Optional[EndpointConfig] = key(None, "the policy is an OpenAI-compatible chat endpoint instead of a model "
                                             "(frozen: no learner trains it; model, lora and generation do not apply; "
                                             "sampling.max_new_tokens and temperature are its defaults), "
                                             "cogym.agents.endpoint")

    def load_options(self) -> dict:
        """The keyword arguments of ``Policy.from_pretrained`` (and ``LoraBase``) these settings make."""
        return dict(dtype=self.dtype, attn_implementation=self.attn_implementation,
                    gradient_checkpointing=self.gradient_checkpointing)


@dataclass
class PromptConfig:
    """A role's prompt."""

    system: str = key("", "Per-role instructions, rendered as the system message by the policy's chat template.")


@dataclass
class GameConfig:
    id: str = key("proposer_solver-v0", "the game (cogym games lists them)")
    num_games: int = key(16, "games alive at once in one rollout")
    group_size: int = key(1, "Episodes per group: num_games / group_size distinct seeds, each played group_size "
                          "times, and a role's turns in those episodes form one group (GRPO/RLOO's \"n samples per "
                          'prompt" for a role whose first observation depends only on the seed, e.g. the generator of '
                          "generator_verifier-v0). 1: group by episode.")
    kwargs: dict = key(factory=dict, help="the game's constructor arguments (its docstring lists them)")
    granularity: str = key("turn", '"turn": one message per step; "token": one token per step (KV caches reused)',
                           choices=GRANULARITIES)
    max_turn_tokens: int = key(0, "token level: longest message; 0 = max(64, the policies' max_new_tokens)")
    modules: list = key(factory=list, help="Python modules or .py files to import first (they register games)")
    on_error: OnError = key("stop", 'A game that raises while it is played: "stop" the run with a report naming the '
                            'game, seed, seat and move (a checkpoint keeps it resumable); "skip" drops that game from '
                            "its rollout and counts it (rollout/game_errors; each one written to game_errors.jsonl in "
                            "the run directory).")
    max_prompt_chars: int = key(MAX_PROMPT_CHARS, "The most characters a seat may be asked at once (its system "
                                "message and the game's text, or its conversation so far); a longer prompt fails its "
                                "game like a contract break (on_error applies) before any tokenizer or model reads "
                                "it. Each game's spec.max_turns is enforced the same way.")
    group_by: GroupBy = key("seed", "What game.group_size's groups are: \"seed\" (the games that played one seed, a "
                            "role's turns in them) or \"prompt\" (a role's seats whose first prompt of the game was the "
                            "same ids). Seeds are GRPO's \"n answers to a prompt\" only when the role's first prompt "
                            "depends on the seed alone; <policy>/mixed_prompt_groups counts groups whose seats saw "
                            "different prompts.")


@dataclass
class EvalConfig:
    declared: bool = key(True, "measure the evaluators the game declares (GameSpec.evaluators), before and after")
    evaluators: dict = key(factory=dict, help="name -> {kind: <evaluator>, ...its fields}, or null: added to the "
                           "game's, or merged over (or dropping) the declared one of the same name "
                           "(cogym.runners.evaluation), e.g. vs_nash: {kind: vs_scripted, opponent: nash}")


@dataclass
class RunConfig:
    name: str = key("run", "the run directory is <out_dir>/<name>-<time> (or --run-dir)")
    out_dir: str = key("runs", "where run directories go")
    seed: int = key(0, "every draw of the run derives from it (core.seeding): the same seed repeats the run")
    iterations: int = key(60, "training iterations (one rollout and one update of every learner each)")
    checkpoint_every: int = key(20, "a checkpoint every N iterations and at the end (0: none); --resume continues one")
    eval_every: int = key(0, "run the evaluators every N iterations too (0: only before and after training)")
    tensorboard: bool = key(True, "TensorBoard event files in the run directory")
    plot: bool = key(True, "learning-curve PNGs in the run directory at the end")
    threads: int = key(0, "torch intra-op threads, pinned; 0: automatic, the cores free of other load (1 at token "
                       "level)")
    backend: Backend = key("local", 'where rollouts run: "local" (this process, or --nproc ranks) or "ray" (see ray.*)')
    async_: AsyncMode = key("off", "\"off\": each rollout uses the newest weights; \"one_step\": iteration i+1's rollout "
                            "overlaps iteration i's update (weights one version behind; ray only)")
    transcripts_every: int = key(10, "transcripts.jsonl (and TensorBoard text): the full messages of the first "
                                 "transcripts_games games of iteration 1, every transcripts_every-th iteration and "
                                 "the last (0: none); `cogym show RUN` prints them")
    transcripts_games: int = key(2, "games kept in transcripts.jsonl per kept iteration")
    strict: bool = key(False, "Warnings about the run itself are errors that stop it (one line): a policy that got no "
                       "turns, or only zero advantages, in its first iterations (`cogym train --strict` sets it)")


@dataclass
class RayConfig:
    """Rollouts on Ray (``run.backend: ray``, :mod:`cogym.runners.ray.rollout`): the driver keeps the
    loop, ``num_rollout_workers`` actors play shares of every iteration's games, and the learners run
    in the driver or (``learners``) in actors of their own."""

    address: Optional[str] = key(None, 'null (or "local"): start a local cluster; "auto": the one `ray start` runs '
                                 'here; or "host:port"')
    num_rollout_workers: int = key(2, "Ray actors that play the games (cogym tournament: its workers, 1 CPU each by "
                                   "default)")
    num_cpus: float = key(1.0, "per rollout worker")
    num_gpus: float = key(0.0, "per rollout worker")
    max_restarts: int = key(3, "per worker: a killed worker is restarted and its share of games replayed")
    max_staleness: int = key(1, "run.async one_step: the most updates a rollout's weights may lag the learner")
    placement: Optional[Placement] = key(None, "null: Ray places each worker where it fits; PACK / SPREAD / "
                                         "STRICT_PACK / STRICT_SPREAD: the workers form one placement group (a bundle "
                                         "of num_cpus/num_gpus each) with that strategy.")
    start_timeout_s: float = key(300.0, "workers must be placed and started (a dead one restarted) within this, or "
                                 "the run stops")
    learners: LearnerPlace = key("driver", 'Where the learners run: "driver" (the cogym train process); "colocated": '
                                 "an actor per trained policy in a rollout worker's placement bundle, sharing its "
                                 'CPUs and GPUs (in sync mode they take turns); "separate": an actor per trained '
                                 "policy in a bundle of its own (learner_num_cpus/gpus).")
    learner_num_cpus: float = key(1.0, "per learner actor, learners: separate")
    learner_num_gpus: float = key(0.0, "per learner actor, learners: separate")
    learner_workers: int = key(1, "Actors per trained policy's learner (learners: colocated or separate): N > 1 makes "
                               "a data-parallel group (torch.distributed: gloo on CPU, NCCL on GPU), each actor "
                               "training on its share of the rows.")
    weight_sync: WeightSync = key("auto", "How the driver's weights reach the workers: \"auto\": through shared memory "
                                  "for workers on the driver's machine, the object store for the others; "
                                  '"object_store": the object store for all; "collective": one broadcast from the '
                                  "driver or learner actor to the workers (gloo on CPU, NCCL on GPUs).")


@dataclass
class LeagueConfig:
    """Self-play against past selves (:mod:`cogym.runners.train.league`): the seats (or roles) in ``seats``
    are played, in each game, by a snapshot of ``policy`` drawn from the league; ``seats`` empty = off."""

    seats: list = key(factory=list, help="seat or role names played by league opponents")
    policy: str = key("", 'the trained policy whose past selves form the league; "": the policy of those seats')
    every: int = key(10, "a snapshot of the policy joins the league every N iterations (the initial weights are the first)")
    size: int = key(0, "> 0: only the most recent N snapshots are kept")
    sampling: LeagueSampling = key("uniform", "how a game's snapshot is drawn: uniform, or pfsp: weight "
                                   "(1 - p_win)^pfsp_power, p_win the learner's win rate against that snapshot with a "
                                   "+1/+2 prior")
    pfsp_power: float = key(1.0, "the exponent of pfsp's weights")
    latest_prob: float = key(0.0, "the probability that a game is plain self-play (the current policy in those seats, "
                             "and its turns there train)")


@dataclass
class StageRun:
    """``stages.<k>.run``: the one ``run`` key a stage sets."""

    iterations: int = key(0, "the stage's iterations (required, >= 1), numbered on from the stage before's (one "
                          "iteration count for the whole run)")


@dataclass
class StageConfig:
    """One stage of a run (``stages``): its name, its learners' keys, its length. docs/training.md#stages."""

    name: str = key("", "the stage's name, written in each of its metrics rows (stage) and its checkpoints; \"\": "
                    "stage<k>")
    learners: dict = key(factory=dict, help="policy id -> learner keys, each set over learners.<id> for this stage "
                         "(e.g. {solver: {algorithm: sft}}); a learner whose keys differ from the previous stage's starts "
                         "fresh there (new optimizer and algorithm state, its KL reference the policy at the stage's "
                         "start)")
    run: StageRun = key(factory=StageRun, help="the stage's length")


@dataclass
class Config:
    run: RunConfig = key(factory=RunConfig, help="the run: its directory, seed, length, checkpoints and logs")
    game: GameConfig = key(factory=GameConfig, help="the game and how its rollouts are played")
    seats: dict = key(factory=dict, help="role or seat name -> policy id")
    policies: dict = key(factory=dict, help="policy id -> PolicyConfig")
    learners: dict = key(factory=dict, help="policy id -> LearnerConfig")
    prompts: dict = key(factory=dict, help="role -> PromptConfig")
    eval: EvalConfig = key(factory=EvalConfig, help="the evaluators measured before, during and after training")
    league: LeagueConfig = key(factory=LeagueConfig, help="self-play against past selves")
    ray: RayConfig = key(factory=RayConfig, help="rollouts (and learners) on Ray, with run.backend: ray")
    sampling: dict = key(factory=dict, help="defaults of every policy's sampling (its own keys win)")
    stages: list = key(factory=list, help="Train in stages, one after the other (e.g. SFT, then GRPO): each a "
                       "{name, learners, run: {iterations}} that sets learner keys over learners.<id> for its "
                       "iterations; the policies' weights carry over, and run.iterations is the stages' sum unless set "
                       "lower (docs/training.md#stages). []: one stage, the config as it is.")

    def to_dict(self) -> dict:
        """Plain data, as YAML writes it (a learner's keys flat, as load_config reads them back; with stages,
        run.iterations only where it ends the run before the stages' sum)."""
        out = dataclasses.asdict(dataclasses.replace(self, learners={}))
        out["learners"] = {pid: lc.flat() for pid, lc in self.learners.items()}
        whole = sum(s.run.iterations for s in self.stages)
        out["run"] = {_yaml_key(k): v for k, v in out["run"].items() if not (k == "iterations" and v == whole)}
        if not self.stages:
            del out["stages"]  # a config without stages writes what it always wrote
        return out


def _yaml_key(field_name: str) -> str:
    """A field named after a Python keyword (``async_``) is written without its underscore."""
    return field_name[:-1] if field_name.endswith("_") and keyword.iskeyword(field_name[:-1]) else field_name


# Keys a config may still hold from before a redesign: old dotted key -> the key that replaced it. Loading
# moves each to its new key with a one-line FutureWarning naming it (load.move_renamed), and docs/config.md
# lists them. The value moves unchanged: no renamed key changed what its value means. The eval keys moved
# when evaluation became the game's (GameSpec.evaluators): the held-out arithmetic set was every config's.
RENAMED = {"eval.heldout": "eval.declared",
           **{f"eval.{k}": f"eval.evaluators.heldout.{k}" for k in ("size", "max_new_tokens", "batch_size", "temperature", "samples")}}


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

    max_new_tokens: int = key(0, "message limit; 0: each checkpoint's run's (a model with no run takes the shared one)")
    temperature: float = key(1.0, "model players' sampling temperature")


@dataclass
class TournamentGame:
    """``game:`` of ``cogym tournament``: the keys of a training config's ``game`` a tournament uses."""

    id: Optional[str] = key(None, "the game (cogym games lists them), e.g. kuhn_poker-v0; required")
    kwargs: dict = same_key(GameConfig, "kwargs")
    modules: list[str] = same_key(GameConfig, "modules")


@dataclass
class TournamentSection:
    """``tournament:`` of ``cogym tournament``: who plays, how pairings are scheduled and scored, where results go."""

    players: list[Union[str, dict]] = key(factory=list, help="checkpoints, run dirs, model dirs, tiny, "
                                          "scripted:<twin>, endpoint:<base_url>?model=M&...; globs; in YAML also "
                                          "{name: N, endpoint: {base_url, model, api_key_env, ...}} "
                                          "(docs/tournaments.md#endpoint-players)")
    policy: Optional[str] = key(None, "which policy of a checkpoint plays (needed when it holds several)")
    role: Optional[str] = key(None, "bind every player without its own @ROLE to this role (or seats): paired scoring")
    sides: Any = key(None, "the seats of each side, [[...], [...]] (default: the game's two sides)")
    fixed: dict = key(factory=dict, help="seat or role -> who plays it outside the sides (scripted:<twin>, a model)")
    schedule: Schedule = key("round_robin", "who meets whom: every pair, a pool against the rest, or swiss rounds")
    scoring: Optional[Scoring] = key(None, "how a pairing is scored (default: the game's; paired when players are "
                                     "bound)")
    games_per_pairing: int = key(100, "even: half the seeds, each in both seat orders")
    pool: list[str] = key(factory=list, help="gauntlet: the fixed pool the other players face")
    swiss_rounds: int = key(0, "swiss: rounds (0: ceil(log2 players) + 1)")
    anchor: Optional[str] = key(None, "the player whose rating is 0 (default: the mean rating is 0)")
    seed: int = key(0, "seeds of the games")
    batch_games: int = key(256, "games played at once")
    max_loaded: int = key(0, "model players held in memory at once (0: all)")
    out: Optional[str] = key(None, "output directory (default tournaments/<game.id>); rerunning resumes it")
    transcripts: int = key(0, "keep the messages of the first K games of each pairing (cogym show OUT)")
    backend: Backend = key("local", 'where games are played: "local" (this process) or "ray" (ray.num_rollout_workers '
                           "workers)")


@dataclass
class TournamentConfig:
    """``cogym tournament``: its ``--config`` YAML, dotted overrides and flags set these keys (a flag wins).
    ``game``, ``sampling``, ``prompts`` and ``ray`` are the sections of a training config, with the keys a
    tournament uses."""

    tournament: TournamentSection = key(factory=TournamentSection, help="who plays, how pairings are scheduled and scored")
    game: TournamentGame = key(factory=TournamentGame, help="the game the players play")
    sampling: TournamentSampling = key(factory=TournamentSampling, help="how model players sample")
    prompts: dict = key(factory=dict, help="role -> PromptConfig: model players' system message (over their runs')")
    ray: RayConfig = key(factory=RayConfig, help="tournament.backend: ray: the workers that play the games")


# Top-level sections whose TYPED_MAPS keys are mappings of names to typed sections.
MAP_OWNERS = (Config, TournamentConfig)
