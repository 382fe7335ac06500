"""The checks across a training config's sections, run once it is built: algorithms and engines,
precision, LoRA, generation backends, leagues and Ray. Each failure is a one-line ConfigError
that says what is wrong, where, and how to fix it."""

from __future__ import annotations

import dataclasses
import math

from cogym.agents.backends import BACKENDS as GENERATION_BACKENDS
from cogym.agents.backends.checks import VLLM_EXTRA, vllm_available
from cogym.agents.lora import peft_available
from cogym.agents.loading import attention_implementations, DTYPES
from cogym.core.errors import ConfigError
from cogym.core.text import brief, QUOTED_CHARS
from cogym.envs import make
from cogym.envs.token_level import GRANULARITIES
from cogym.learners import registry
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import DYNAMIC_SAMPLING
from cogym.learners.losses import LOSS_AGG_MODES
from cogym.runners.config.schema import algorithm_choices, ASYNC_MODES, BACKENDS, Config, ENGINES, KL_LOSS, KL_REWARD, LEAGUE_SAMPLING, LeagueConfig, LEARNER_PLACES, PLACEMENTS, PolicyConfig, suggest, TournamentSection, WEIGHT_SYNCS
from cogym.runners.rollout.agents import twin_name

# Upper bounds of the integer keys that memory follows (the game copies, the seed lists), far above any
# real run: a typo of a few zeros (game.num_games=10**9) is refused at load instead of filling memory.
MAX_GAMES_AT_ONCE = 100_000
MAX_GAMES_PER_PAIRING = 1_000_000
# The largest game.max_prompt_chars a config may set (a GiB of text is no prompt); its default, the cap
# the play loop holds seats to, is cogym.runners.rollout.loop.MAX_PROMPT_CHARS (256 Ki characters).
MAX_PROMPT_CHARS_BOUND = 1 << 30
MAX_NAME_BYTES = 200  # a file name is at most 255 bytes on common file systems; the run adds "-YYYYMMDD-HHMMSS"
SEED_BOUND = 2**32  # numpy's legacy seeding and every derived seed are 32-bit; torch.manual_seed takes 64


def check_seed(seed: int, where: str) -> None:
    if seed < 0:
        raise ConfigError(f"{where} must be >= 0, got {brief(seed)}")
    if seed >= SEED_BOUND:
        raise ConfigError(f"{where} must be < 2**32 (seeds are 32-bit), got {brief(seed)}")


def check_count(n: int, where: str, most: int, what: str, least: int = 1) -> None:
    if n < least:
        raise ConfigError(f"{where} must be >= {least}, got {brief(n)}")
    if n > most:
        raise ConfigError(f"{where} must be at most {most:,} ({what}), got {brief(n)}")


def _check_run_name(name: str, out_dir: str) -> None:
    """run.name and run.out_dir become a directory path: no NUL byte (the OS refuses it), and no part of the
    name longer than a file system allows once the time is added (``<name>-YYYYMMDD-HHMMSS``)."""
    for key, value in (("run.name", name), ("run.out_dir", out_dir)):
        if "\0" in value:
            raise ConfigError(f"{key} must not contain a NUL character, got {brief(value)}")
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in name.split("/")), default=0)
    if longest > MAX_NAME_BYTES:
        raise ConfigError(f"run.name names a directory: each part of it must be at most {MAX_NAME_BYTES} bytes "
                          f"(the time is added to it), got one of {longest}: {brief(name)}")


def check_choice(value: str, options: tuple, where: str) -> None:
    if value not in options:
        shown = brief(value)
        raise ConfigError(f"{where} must be one of {', '.join(options)}; got {shown}{suggest(str(value)[:QUOTED_CHARS], options)}")


def _check_learner_plugins(cfg: Config, pid: str, lc: LearnerConfig, where: str) -> None:
    """DAPO dynamic sampling and overlong shaping, then each algorithm's own config (it validates itself)."""
    check_choice(lc.dynamic_sampling, DYNAMIC_SAMPLING, f"{where}.dynamic_sampling")
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
    check_choice(str(pol.dtype).lower(), tuple(DTYPES), f"policies.{pid}.dtype")
    if pol.attn_implementation is not None:
        check_choice(pol.attn_implementation, tuple(attention_implementations()),
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
        raise ConfigError(f"{where}: the adapter is named after the policy, and {brief(pid)} cannot name a peft adapter "
                          "(no dots, and not a part of 'lora_'); rename the policy")
    lc = cfg.learners[pid]
    if lc.engine == "deepspeed" and lc.zero_stage == 3:
        raise ConfigError(f"{where}: ZeRO-3 would partition the frozen base model that LoRA adapters share (and that is "
                          f"their KL reference); set learners.{pid}.zero_stage to 0, 1 or 2 or learners.{pid}.engine: "
                          "torch (only the adapter has optimizer state, so ZeRO-3 saves little)")
    for other, opc in cfg.policies.items():
        if other != pid and opc.lora.enabled and opc.model == pol.model and opc.load_options() != pol.load_options():
            raise ConfigError(f"policies.{pid} and policies.{other} are LoRA adapters on one shared base model "
                              f"{brief(pol.model)}, so their dtype, attn_implementation and gradient_checkpointing must be "
                              f"equal ({pol.load_options()} vs {opc.load_options()})")


def _check_generation(cfg: Config, pid: str, pol: PolicyConfig) -> None:
    """policies.<id>.generation: a known backend, installed, and a setup it supports."""
    where = f"policies.{pid}.generation"
    check_choice(pol.generation.backend, GENERATION_BACKENDS, f"{where}.backend")
    if pol.generation.backend != "vllm":
        if pol.generation.vllm:
            raise ConfigError(f"{where}.vllm sets engine arguments, but {where}.backend is "
                              f"{brief(pol.generation.backend)}; set {where}.backend: vllm or drop {where}.vllm")
        return
    if not vllm_available():
        raise ConfigError(f"{where}.backend: vllm needs vLLM, which is not installed: {VLLM_EXTRA}")
    if pol.lora.enabled:  # LoRA policies of one base model share one engine: one set of engine arguments
        for other, opc in cfg.policies.items():
            if (other != pid and opc.lora.enabled and opc.model == pol.model and opc.generation.backend == "vllm"
                    and opc.generation.vllm != pol.generation.vllm):
                raise ConfigError(f"policies.{pid} and policies.{other} are LoRA adapters on {brief(pol.model)} served by one "
                                  f"shared vLLM engine, so their generation.vllm must be equal ({pol.generation.vllm} vs "
                                  f"{opc.generation.vllm})")
    if cfg.game.granularity == "token":
        raise ConfigError(f"{where}.backend: vllm answers whole turns; game.granularity: token steps the policy's "
                          "own model token by token, so use game.granularity: turn")
    if pol.sampling.top_k or pol.sampling.top_p < 1:
        raise ConfigError(f"{where}.backend: vllm samples without top_k/top_p (vLLM's log-probs would then be of the "
                          f"filtered distribution); set policies.{pid}.sampling.top_k: 0 and top_p: 1")


def _check_endpoint(cfg: Config, pid: str, pol: PolicyConfig) -> None:
    """policies.<id>.endpoint: a frozen player (no learner but a frozen one, which is added when absent), with
    none of a model's keys that would do nothing, at turn level."""
    where = f"policies.{pid}"
    lc = cfg.learners.get(pid)
    if lc is not None and (lc.algorithm != "frozen" or lc.role_algorithms):
        algorithm = next(iter(lc.role_algorithms.values())) if lc.algorithm == "frozen" else lc.algorithm
        raise ConfigError(f"learners.{pid} gives policy {brief(pid)} the algorithm {algorithm}, but {where} is an endpoint "
                          f"({pol.endpoint.base_url}), which is never trained; drop learners.{pid} (or set its "
                          "algorithm: frozen)")
    if lc is None:
        cfg.learners[pid] = LearnerConfig(algorithm="frozen")
    if pol.lora.enabled or pol.generation.backend != "hf" or pol.generation.vllm:
        raise ConfigError(f"{where} is an endpoint, so {where}.lora and {where}.generation (a model's) do nothing; "
                          "drop them")
    if cfg.game.granularity == "token":
        raise ConfigError(f"{where} is an endpoint, which answers whole messages; game.granularity: token steps "
                          "models token by token, so use game.granularity: turn")


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
    check_choice(lg.sampling, LEAGUE_SAMPLING, "league.sampling")
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
        raise ConfigError(f"league.seats: seats gives them to {brief(pid)}; the league plays past selves of a trained policy "
                          f"there, so seat that policy (e.g. seats.{lg.seats[0]}=<policy>) or set league.policy")
    if pid not in cfg.policies:
        raise ConfigError(f"league.policy names policy {brief(pid)}, which is not under policies "
                          f"(defined: {', '.join(cfg.policies) or 'none'})")
    lc = cfg.learners[pid]
    if lc.algorithm == "frozen":
        raise ConfigError(f"league.policy {brief(pid)} is frozen, so every snapshot would be the same model; name a "
                          "trained policy (or drop league.seats and seat a frozen copy directly)")
    if cfg.policies[pid].lora.enabled:
        raise ConfigError(f"league.policy {brief(pid)} is a LoRA adapter; leagues snapshot full models only (set "
                          f"policies.{pid}.lora.r: 0)")
    if lc.engine == "deepspeed" and lc.zero_stage == 3:
        raise ConfigError(f"league.policy {brief(pid)} trains with ZeRO-3, whose partitioned weights a snapshot cannot "
                          f"copy; use learners.{pid}.zero_stage 1 or 2")
    reserved = [p for p in cfg.policies if p.startswith("league:")]
    if reserved:
        raise ConfigError(f"policies: ids starting with 'league:' name league members; rename {brief(reserved[0])}")


def _check_reward_from(cfg: Config, pid: str, lc: LearnerConfig, where: str) -> None:
    """reward_from names another policy whose learner is a reward model, on a run that can rescore in the driver."""
    rm = lc.reward_from
    learner = cfg.learners.get(rm)
    if rm == pid or rm not in cfg.policies or learner is None or learner.algorithm != "reward_model":
        raise ConfigError(f"{where}.reward_from must name another policy whose learner has algorithm: reward_model, got "
                          f"{brief(rm)}; add policies.{rm} and learners.{rm}.algorithm=reward_model, or drop reward_from")
    if lc.dynamic_sampling != "off" or cfg.run.backend == "ray":
        raise ConfigError(f"{where}.reward_from: the reward model rescores each batch in this process, which dynamic "
                          "sampling's refills and run.backend: ray do not pass through; set dynamic_sampling: off and "
                          "run.backend: local")


def _check_learner(cfg: Config, pid: str, lc: LearnerConfig, where: str) -> None:
    """learners.<id>: common keys in range and consistent, then the plug-ins' own checks."""
    if pid not in cfg.policies:
        raise ConfigError(f"{where} trains policy {brief(pid)}, which is not under policies")
    check_choice(lc.algorithm, algorithm_choices(), f"{where}.algorithm")
    for role, name in lc.role_algorithms.items():
        check_choice(name, algorithm_choices(per_role=True), f"{where}.role_algorithms.{role}")
    check_choice(lc.engine, ENGINES, f"{where}.engine")
    check_choice(lc.kl_in_reward, KL_REWARD, f"{where}.kl_in_reward")
    if lc.kl_in_loss == "k1":
        raise ConfigError(f"{where}.kl_in_loss: k1 has zero expected gradient in the loss (docs/algorithms.md §3.1); "
                          "use k2 (reverse KL) or k3, or put k1 in the reward with kl_in_reward: k1")
    check_choice(lc.kl_in_loss, KL_LOSS, f"{where}.kl_in_loss")
    check_choice(lc.loss_agg, LOSS_AGG_MODES, f"{where}.loss_agg")
    for name in ("lr", "max_grad_norm", "clip_low", "clip_high", "kl_reward_coef", "kl_loss_coef",
                 "entropy_coef", "weight_decay"):
        if not math.isfinite(getattr(lc, name)):
            raise ConfigError(f"{where}.{name} must be a finite number, got {getattr(lc, name)}")
    if lc.max_grad_norm <= 0:
        raise ConfigError(f"{where}.max_grad_norm must be > 0 (gradients are clipped to this norm), got {lc.max_grad_norm}")
    _check_learner_plugins(cfg, pid, lc, where)
    if lc.reward_from:
        _check_reward_from(cfg, pid, lc, where)
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
        raise ConfigError(f"{where}.norm_const is required with loss_agg {brief(lc.loss_agg)}: "
                          "set it to the maximum response length")
    if lc.norm_const is not None and not (math.isfinite(lc.norm_const) and lc.norm_const > 0):
        raise ConfigError(f"{where}.norm_const must be > 0 (the maximum response length), got {lc.norm_const}")


def validate(cfg: Config) -> None:
    """Cross-field checks: every seat has a policy, every policy a learner, values in range."""
    check_seed(cfg.run.seed, "run.seed")
    _check_run_name(cfg.run.name, cfg.run.out_dir)
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
    check_count(cfg.game.num_games, "game.num_games", MAX_GAMES_AT_ONCE, "games alive at once, each a copy of the game")
    if cfg.game.group_size < 1 or cfg.game.num_games % cfg.game.group_size:
        raise ConfigError(f"game.group_size must be >= 1 and divide game.num_games = {cfg.game.num_games}, "
                          f"got {cfg.game.group_size}")
    check_choice(cfg.game.granularity, GRANULARITIES, "game.granularity")
    check_choice(cfg.game.on_error, ("stop", "skip"), "game.on_error")
    check_count(cfg.game.max_prompt_chars, "game.max_prompt_chars", MAX_PROMPT_CHARS_BOUND, "characters one seat is asked at once")
    check_choice(cfg.game.group_by, ("seed", "prompt"), "game.group_by")
    if cfg.game.max_turn_tokens < 0:
        raise ConfigError(f"game.max_turn_tokens must be >= 0 (0: the policies' max_new_tokens), got {cfg.game.max_turn_tokens}")
    if cfg.game.max_turn_tokens and cfg.game.granularity != "token":
        raise ConfigError("game.max_turn_tokens only applies with game.granularity: token; at turn level "
                          "policies.<id>.sampling.max_new_tokens bounds a message")
    if not cfg.seats:
        raise ConfigError("seats is empty; map each role to a policy, e.g. seats: {solver: solver}")
    for seat, pid in cfg.seats.items():
        if not isinstance(pid, str):
            raise ConfigError(f"seats.{seat} must be a policy id (a string), got {brief(pid)}")
        if twin_name(pid) is not None:
            continue  # a scripted twin of the game's role; checked against the game when built
        if pid not in cfg.policies:
            raise ConfigError(f"seats.{seat} names policy {brief(pid)}, which is not under policies "
                              f"(defined: {', '.join(cfg.policies) or 'none'})")
    for pid, pol in cfg.policies.items():
        if pol.endpoint is not None:
            _check_endpoint(cfg, pid, pol)
            continue
        if pid not in cfg.learners:
            raise ConfigError(f"policy {brief(pid)} has no learner; add learners.{pid} (use algorithm: frozen to keep it fixed)")
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
    check_choice(cfg.run.backend, BACKENDS, "run.backend")
    check_choice(cfg.run.async_, ASYNC_MODES, "run.async")
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
        check_choice(rc.placement, PLACEMENTS, "ray.placement")
    if rc.start_timeout_s <= 0:
        raise ConfigError(f"ray.start_timeout_s must be > 0, got {rc.start_timeout_s}")
    check_choice(rc.learners, LEARNER_PLACES, "ray.learners")
    check_choice(rc.weight_sync, WEIGHT_SYNCS, "ray.weight_sync")
    if rc.learner_num_cpus <= 0 or rc.learner_num_gpus < 0:
        raise ConfigError(f"ray.learner_num_cpus must be > 0 and ray.learner_num_gpus >= 0 (per learner actor), "
                          f"got {rc.learner_num_cpus} and {rc.learner_num_gpus}")
    _check_learner_groups(cfg)
    if rc.weight_sync == "collective" and cfg.run.async_ != "off":
        raise ConfigError("ray.weight_sync: collective sends each policy's newest weights only, and run.async: "
                          f"{cfg.run.async_} samples with older ones; use ray.weight_sync: auto with run.async")
    if rc.max_staleness < 1:
        raise ConfigError(f"ray.max_staleness must be >= 1 (one_step rollouts use weights one update old), "
                          f"got {rc.max_staleness}")


def _check_learner_groups(cfg: Config) -> None:
    """ray.learner_workers: a positive count; above 1, learner actors whose algorithms train data-parallel."""
    rc = cfg.ray
    n = rc.learner_workers
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"ray.learner_workers must be an integer >= 1 (learner actors per trained policy), got {brief(n)}")
    if n == 1:
        return
    if rc.learners == "driver":
        raise ConfigError(f"ray.learner_workers: {n} makes each trained policy's learner a group of {n} Ray actors; "
                          "set ray.learners to colocated or separate (the learners now run in the driver)")
    alone = registry.one_process_only(cfg.learners)
    if alone:
        raise ConfigError(f"ray.learner_workers: {n}: learners.{alone[0]} uses algorithm {alone[1]}, which trains in "
                          "one process only; set ray.learner_workers: 1")


def check_data_parallel(cfg: Config, world: int) -> None:
    """ConfigError unless ``cfg`` can train in ``world`` data-parallel processes (``--nproc``)."""
    if world <= 1:
        return
    if cfg.run.backend == "ray":
        raise ConfigError("run.backend: ray runs one driver process; drop --nproc (rollouts scale with "
                          "ray.num_rollout_workers)")
    n = cfg.game.num_games
    if n % world:
        raise ConfigError(f"--nproc {world}: game.num_games = {n} is not divisible by {world} (each process plays "
                          f"num_games / nproc games of every iteration); set game.num_games to a multiple of {world}, "
                          f"e.g. game.num_games={(n // world + 1) * world}")
    for pid, pc in cfg.policies.items():
        if pc.generation.backend == "vllm":
            raise ConfigError(f"--nproc {world}: policies.{pid}.generation.backend: vllm runs one engine for one "
                              "process (it batches the whole rollout itself); run it without --nproc")
    alone = registry.one_process_only(cfg.learners)
    if alone:
        raise ConfigError(f"--nproc {world}: learners.{alone[0]} uses algorithm {alone[1]}, which trains in one process "
                          "only; run it without --nproc")
    for pid, lc in cfg.learners.items():
        if lc.engine == "deepspeed" and lc.zero_stage == 3:
            raise ConfigError(f"--nproc {world}: learners.{pid}.zero_stage 3 partitions the weights across processes, and "
                              "every generate call would then have to gather them on all ranks in step; use zero_stage 1 "
                              "or 2 (the optimizer state is still partitioned)")


# ----------------------------------------------------------------------------------------- cogym tournament
TOURNAMENT_LAYOUT = ("cogym tournament's YAML has the sections tournament, game, sampling, prompts and ray; the last "
                     "four are cogym train's, with the keys a tournament uses")
# Keys of the first (flat) tournament YAML format, and where they are now.
MOVED_TOURNAMENT_KEYS = {"max_new_tokens": "sampling.max_new_tokens", "temperature": "sampling.temperature",
                         "game_kwargs": "game.kwargs", "modules": "game.modules",
                         **{f.name: f"tournament.{f.name}" for f in dataclasses.fields(TournamentSection)}}


def check_tournament_layout(tree: dict) -> None:
    """A key of the flat tournament format in a ``--config`` tree: a one-line error naming its new place."""
    if isinstance(tree.get("game"), str):
        raise ConfigError(f"game: write game.id (game: {{id: {tree['game'][:QUOTED_CHARS]}}}; {TOURNAMENT_LAYOUT})")
    for old, new in MOVED_TOURNAMENT_KEYS.items():
        if old in tree:
            raise ConfigError(f"{old}: write {new} ({TOURNAMENT_LAYOUT})")
    for role, value in (tree.get("prompts") or {}).items() if isinstance(tree.get("prompts"), dict) else ():
        if isinstance(value, str):
            raise ConfigError(f"prompts.{role}: write prompts.{role}.system (the prompts section of cogym train's configs)")


def validate_tournament(tc) -> None:  # noqa: ANN001 (a TournamentConfig; the spec's are tournament.settle's)
    """``cogym tournament``'s keys: the bounds of those that memory follows (its seed, games per pairing,
    batch), the sides' shape, a game, the backend, and Ray's workers."""
    t = tc.tournament
    check_seed(t.seed, "tournament.seed")
    if t.games_per_pairing > MAX_GAMES_PER_PAIRING:
        raise ConfigError(f"tournament.games_per_pairing must be at most {MAX_GAMES_PER_PAIRING:,} (the seeds of a "
                          f"pairing are listed up front), got {brief(t.games_per_pairing)}")
    check_count(t.batch_games, "tournament.batch_games", MAX_GAMES_AT_ONCE, "games played at once")
    sides = t.sides  # typed Any in the schema (a list of seat lists): its shape is checked here
    if sides is not None and not (isinstance(sides, list) and all(
            isinstance(side, list) and all(isinstance(seat, str) for seat in side) for side in sides)):
        raise ConfigError(f"tournament.sides must be lists of seats, e.g. [[player_0], [player_1]], got {brief(sides)}")
    if not tc.game.id:
        raise ConfigError("cogym tournament needs --game (e.g. --game kuhn_poker-v0) or game.id in --config")
    check_choice(t.backend, BACKENDS, "tournament.backend")
    if t.backend == "ray" and tc.ray.num_rollout_workers < 1:
        raise ConfigError(f"ray.num_rollout_workers must be >= 1, got {tc.ray.num_rollout_workers}")


# --------------------------------------------------------------- the checks that need the config's game
def make_game(game_id: str, kwargs: dict, key: str = "game"):  # noqa: ANN201 (a cogym game)
    """An instance of the game; an unknown game or argument is a ConfigError naming ``key`` (the
    registry's message names the fix)."""
    try:
        return make(game_id, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: {exc}") from exc


def check_role_keys(cfg: Config, roles: tuple[str, ...]) -> None:
    """Every role a config's ``prompts`` and ``learners.<id>.role_algorithms`` name is one of the game's."""
    for role in cfg.prompts:
        if role not in roles:
            raise ConfigError(f"prompts.{role}: {cfg.game.id} has no role {role!r}{suggest(role, roles)}")
    for pid, lc in cfg.learners.items():
        for role in lc.role_algorithms:
            if role not in roles:
                raise ConfigError(f"learners.{pid}.role_algorithms.{role}: {cfg.game.id} has no role {role!r}"
                                  f"{suggest(role, roles)}")


def check_groups(cfg: Config, game, assignment: dict[str, tuple[str, str]]) -> None:
    """A grouped estimator on a role with one seat per game learns nothing: the group is that seat's
    moves in one episode, which all share its return, so every advantage is 0."""
    for role in game.spec.roles:
        for pid in sorted({p for p, r in assignment.values() if r == role}):
            lc = cfg.learners.get(pid)
            if lc is None or lc.algorithm == "frozen":
                continue
            # Groups form inside one policy's batch: count the seats of the role this policy plays.
            seats = [s for s, (p, r) in assignment.items() if r == role and p == pid]
            estimator = lc.role_algorithms.get(role, lc.algorithm)
            if registry.get(estimator).grouped and len(seats) == 1 and cfg.game.group_size == 1:
                raise ConfigError(
                    f"learners.{pid}: {estimator} groups turns by (episode, role), and policy {pid!r} plays one "
                    f"{role!r} seat per game of {cfg.game.id}, so every group has one return and every advantage is 0. Play "
                    "each start several times (game.group_size: 4 groups 4 episodes of one seed), use reinforce_pp (a "
                    f"batch baseline) for this role (learners.{pid}.role_algorithms.{role}: reinforce_pp), or a game "
                    "argument that seats several players of the role")


def check_outcomes(cfg: Config, game, assignment: dict[str, tuple[str, str]]) -> None:
    """An algorithm that reads end-of-game facts (SPIN: ``reference``) needs a game that declares them
    (``GameSpec.outcomes``) for at least one role it trains."""
    for pid in sorted({p for p, _ in assignment.values()}):
        lc = cfg.learners.get(pid)
        if lc is None or lc.algorithm == "frozen":
            continue
        roles = sorted({r for p, r in assignment.values() if p == pid})
        for name in sorted({lc.role_algorithms.get(role, lc.algorithm) for role in roles}):
            trained = [r for r in roles if lc.role_algorithms.get(r, lc.algorithm) == name]
            for key in registry.get(name).outcome_keys:
                if not any(key in game.spec.outcomes.get(r, ()) for r in trained):
                    raise ConfigError(f"learners.{pid}: {name} reads each turn's {key!r} (the game's end-of-game facts), "
                                      f"and {cfg.game.id} declares none for role(s) {', '.join(trained)} (GameSpec.outcomes: "
                                      f"{dict(game.spec.outcomes) or 'none'}); train a role whose game reports it")


def check_league_seats(cfg: Config, league: list[str], assignment: dict[str, tuple[str, str]]) -> None:
    """Every league seat is the league policy's in ``seats``, and the policy keeps one seat of its own."""
    pid = league_policy(cfg)
    for seat in league:
        if assignment[seat][0] != pid:
            raise ConfigError(f"league.seats: seat {seat!r} is played by {assignment[seat][0]!r}, but the league plays "
                              f"past selves of policy {pid!r} in its seats; seat it there (seats.{seat}={pid})")
    if not [s for s, (p, _) in assignment.items() if p == pid and s not in league]:
        raise ConfigError(f"league.seats cover every seat of policy {pid!r}, so it would only watch its past selves play; "
                          "leave it at least one seat of its own (the league seats are its opponents)")


def check_token_seats(tokenizers: dict) -> None:
    """``game.granularity: token``: at least one model seat, all of whose policies (id -> tokenizer, in
    order) share one tokenizer and chat template (one codec renders every seat's prompt)."""
    if not tokenizers:
        raise ConfigError("game.granularity: token needs at least one model seat (every seat is scripted)")
    (first, tok), *rest = tokenizers.items()
    for pid, other in rest:
        if other.get_vocab() != tok.get_vocab() or other.chat_template != tok.chat_template:
            raise ConfigError(f"game.granularity: token needs every model seat to share one tokenizer and chat template; "
                              f"policies {first!r} and {pid!r} differ (a token is an action, and one codec renders "
                              "every seat's prompt)")
