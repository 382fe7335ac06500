"""cogym's contract checker, stricter than PettingZoo's ``api_test``.

``check_game(env_id)`` plays episodes with every scripted twin, random text from the action
space, and pathological messages, and raises ``AssertionError`` naming the game, the seed, the
strategies and what broke. It checks:

* determinism: the same seed and the same actions give the same observations and rewards, in
  a fresh copy and after re-resetting a used one;
* RNG isolation: playing and resetting one copy never changes another copy's draws, and no game
  touches the global ``random`` / ``numpy.random`` state;
* rewards inside ``spec.reward_range`` (every step and every episode return);
* zero-sum episode returns where ``spec.zero_sum``;
* every episode ends within ``spec.max_turns`` acting turns;
* ``ready_agents()``: starts at ``agent_selection``, is stepped in order, and one ready seat's
  move never changes another ready seat's observation;
* observations inside their space, ``role_of`` inside ``spec.roles``, invalid moves explained;
* no action from the action space (or a pathological string) ever raises.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, Text

from cogym.core import seeding
from cogym.core.text import twin_failure
from cogym.envs.base import CogymEnv, GameSpec, check_messages
from cogym.envs.contract import ContractViolation, check_infos, check_rewards, observed_text
from cogym.envs.contract import check_observation as check_turn_observation
from cogym.envs.registry import make, scripted_strategies
from cogym.envs.token_level import GRANULARITIES, TokenLevelEnv

# Adversarial messages every game must survive (and score in bounded time).
PATHOLOGICAL: tuple[str, ...] = ("", "9**9**9**9", "(" * 10_000 + "1" + ")" * 10_000, "7" * 1_000_000, "\x00\u202e\U0001f600", " " * 100)
_SAMPLE, _PATHOLOGICAL = "<sample>", "<pathological>"

Trace = list[tuple[Any, ...]]


def _freeze(obj: Any) -> Any:
    """A comparable copy of an observation / info (numpy arrays become tuples with dtype)."""
    if isinstance(obj, np.ndarray):
        return ("ndarray", str(obj.dtype), obj.shape, obj.tolist())
    if isinstance(obj, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(_freeze(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


class _Episode:
    """One episode played by a fixed plan (role -> strategy), recording everything it saw."""

    def __init__(self, env: CogymEnv, label: str, plan: dict[str, str], scripted: dict[str, dict[str, Callable]], seed: int) -> None:
        self.env, self.label, self.plan, self.scripted = env, label, plan, scripted
        self.rng = seeding.rng("game.checks", seed)  # the players' RNG, never the game's
        self.trace: Trace = []
        self.queues: dict[str, list[int]] = {}
        self.returns: dict[str, float] = {}
        self.last_infos: dict[str, dict] = {}  # each seat's latest info: its outcome once the episode ends
        self.turns = 0

    def fail(self, what: str) -> AssertionError:
        return AssertionError(f"{self.label} plan={self.plan}: {what}")

    def action(self, agent: str, obs: Any) -> Any:
        strategy = self.plan[self.env.role_of(agent)]
        if strategy == _SAMPLE:
            return self.env.action_space(agent).sample()
        if not isinstance(self.env, TokenLevelEnv):
            return self._message(agent, strategy, obs["text"])  # checked by check_observation first
        # Token level: a scripted or pathological message is emitted one token per step.
        queue = self.queues.setdefault(agent, [])
        if not self.env.in_message(agent):
            # A new message; what is left of the last one (cut by max_turn_tokens or the game) is dropped.
            queue[:] = self.env.encode_message(self._message(agent, strategy, self._text(agent)))
        return queue.pop(0)

    def _message(self, agent: str, strategy: str, text: str) -> str:
        if strategy == _PATHOLOGICAL:
            return PATHOLOGICAL[int(self.rng.integers(len(PATHOLOGICAL)))]
        role = self.env.role_of(agent)
        try:
            return self.scripted[role][strategy](text, self.rng)
        except Exception as exc:  # noqa: BLE001 - a twin's bug is named as the twin's, not the game's
            raise self.fail(twin_failure(strategy, agent, role, exc)) from exc

    def _text(self, agent: str) -> str:
        """The turn-level text ``agent`` is asked about, held to the contract as the play loop holds it."""
        try:
            return observed_text(self.env, agent)
        except ContractViolation as exc:
            raise self.fail(str(exc)) from None

    def record(self, agent: str, action: Any) -> None:
        env = self.env
        try:  # the rules the play loop holds every step to (cogym.envs.contract), in its words
            check_rewards(env.unwrapped)
            check_infos(env.unwrapped.infos)
        except ContractViolation as exc:
            raise self.fail(f"after {agent}'s move: {exc}") from None
        for a, r in env.rewards.items():
            self.returns[a] = self.returns.get(a, 0.0) + float(r)
        for a, info in env.infos.items():
            self.last_infos[a] = info
        short = action if not isinstance(action, str) or len(action) <= 64 else action[:64] + f"...({len(action)} chars)"
        self.trace.append((agent, short, _freeze(env.rewards), _freeze(env.terminations), _freeze(env.truncations), _freeze(env.infos)))

    def check_observation(self, agent: str, obs: Any) -> None:
        if not isinstance(self.env, TokenLevelEnv):
            try:
                check_turn_observation(self.env.unwrapped, agent, obs)
            except ContractViolation as exc:
                raise self.fail(str(exc)) from None
        elif not self.env.observation_space(agent).contains(obs):
            raise self.fail(f"observation of {agent} is outside its observation_space: {str(obs)[:200]}")

    def check_messages(self, agent: str, obs: Any) -> None:
        """A conversation role's new messages: well-formed, bounded, the same when asked twice, and
        asking changes nothing the seat observes."""
        game = self.env.unwrapped
        try:
            first = check_messages(game.messages(agent), f"messages({agent!r})")
        except (TypeError, ValueError) as exc:
            raise self.fail(str(exc)) from None
        if check_messages(game.messages(agent), f"messages({agent!r})") != first or _freeze(self.env.observe(agent)) != _freeze(obs):
            raise self.fail(f"messages({agent!r}) must not change the game (asked twice it gave another answer, "
                            "or the seat's observation changed)")
        self.trace.append((agent, "messages", tuple((m["role"], m["content"]) for m in first)))

    def play(self, seed: int | None, reset: bool = True) -> "_Episode":
        env = self.env
        if reset:
            env.reset(seed=seed)
        for agent in env.agents:
            role = env.role_of(agent)
            if role not in env.spec.roles:
                raise self.fail(f"role_of({agent!r}) = {role!r} is not in spec.roles {env.spec.roles}")
        limit = env.spec.max_turns + 2 * len(env.possible_agents) + 2
        for _ in range(limit):
            if not env.agents:
                break
            ready = env.ready_agents()
            if not ready:
                agent = env.agent_selection
                obs, _, terminated, truncated, _ = env.last()
                if not (terminated or truncated):
                    raise self.fail(f"ready_agents() is empty but {agent} (agent_selection) is live")
                self.check_observation(agent, obs)
                self.trace.append((agent, "obs", _freeze(obs)))
                env.step(None)
                self.record(agent, None)
                continue
            if ready[0] != env.agent_selection or len(set(ready)) != len(ready):
                raise self.fail(f"ready_agents() {ready} must list distinct seats starting at agent_selection {env.agent_selection!r}")
            seen = {a: env.observe(a) for a in ready}
            for a in ready:  # a broken observation is named as such, before a twin reads it
                self.check_observation(a, seen[a])
            actions = {a: self.action(a, seen[a]) for a in ready}
            for a in ready:
                if a not in env.agents or env.terminations[a] or env.truncations[a]:
                    break  # the game ended inside the batch; the rest are finished seats now
                if env.agent_selection != a:
                    raise self.fail(f"ready_agents() said {ready} but after the previous step agent_selection is {env.agent_selection!r}, not {a!r}")
                now = env.observe(a)
                if _freeze(now) != _freeze(seen[a]):
                    raise self.fail(f"observation of ready seat {a} changed when another ready seat acted: {str(seen[a])[:100]} -> {str(now)[:100]}")
                self.check_observation(a, now)
                self.trace.append((a, "obs", _freeze(now)))
                if env.role_of(a) in env.spec.conversation:
                    self.check_messages(a, now)
                env.step(actions[a])
                self.turns += 1
                self.record(a, actions[a])
                for info in env.infos.values():
                    if info.get("invalid") and not isinstance(info.get("reason"), str):
                        raise self.fail(f"an invalid move must be explained in infos[...]['reason'], got {info}")
        else:
            raise self.fail(f"episode did not end within {limit} steps (spec.max_turns = {env.spec.max_turns}); "
                            f"{_stuck(self.trace)}")
        if self.turns > env.spec.max_turns:
            raise self.fail(f"episode took {self.turns} acting turns, more than spec.max_turns = {env.spec.max_turns}")
        for seat in env.possible_agents:
            promised = env.spec.outcomes.get(env.role_of(seat), ())
            missing = [k for k in promised if k not in self.last_infos.get(seat, {})]
            if missing:
                raise self.fail(f"spec.outcomes promises {missing} for role {env.role_of(seat)!r}, but seat {seat}'s last "
                                f"info is {self.last_infos.get(seat)}")
        if env.spec.zero_sum and abs(sum(self.returns.values())) > 1e-6:
            raise self.fail(f"spec.zero_sum but the returns {self.returns} sum to {sum(self.returns.values())}")
        return self


def _plans(spec: GameSpec, scripted: dict[str, dict[str, Callable]], episodes: int) -> list[dict[str, str]]:
    """Deterministic mix: every strategy of every role appears, plus random and pathological text."""
    options = {role: sorted(scripted.get(role, {})) + [_SAMPLE, _PATHOLOGICAL] for role in spec.roles}
    return [{role: opts[(i + j) % len(opts)] for j, (role, opts) in enumerate(options.items())} for i in range(episodes)]


def _global_rng_state() -> Any:
    return (random.getstate(), _freeze(np.random.get_state(legacy=False)))


def check_game(env_id: str, kwargs: dict[str, Any] | None = None, episodes: int = 20, granularity: str = "turn") -> None:
    """Hold game ``env_id`` (built with ``kwargs``, played at ``granularity``) to cogym's contract;
    ``AssertionError`` on failure. At token level scripted and pathological messages are emitted one
    token per step (cut to ``max_turn_tokens`` like any message) and random play draws token ids."""
    kwargs = dict(kwargs or {})
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if granularity == "token":
        kwargs["granularity"] = "token"
    env = make(env_id, **kwargs)
    if not isinstance(getattr(env, "spec", None), GameSpec):
        raise AssertionError(f"{env_id}: env.spec must be a GameSpec, got {type(getattr(env, 'spec', None)).__name__}")
    _check_spaces(env_id, env)
    _check_render(env_id, kwargs)
    scripted = scripted_strategies(env_id)
    for role in env.spec.roles:
        if not scripted.get(role):
            raise AssertionError(f"{env_id}: role {role!r} has no scripted twin; register some with register(..., scripted={{{role!r}: {{...}}}})")
    copies = [make(env_id, **kwargs) for _ in range(3)]
    before = _global_rng_state()
    for i, plan in enumerate(_plans(env.spec, scripted, episodes)):
        label = f"{env_id} {kwargs} seed={i}"
        try:
            first = _Episode(env, label, plan, scripted, seed=i).play(seed=i)
            # Same seed, same players: a fresh copy and the re-reset used copy must agree.
            fresh = _Episode(copies[0], label, plan, scripted, seed=i).play(seed=i)
            again = _Episode(env, label, plan, scripted, seed=i).play(seed=i)
            # Isolation: reset B, then play and reset A with other seeds; B must not notice.
            b = copies[1]
            b.reset(seed=i)
            other = dict(reversed(list(plan.items())))
            _Episode(copies[2], label, other, scripted, seed=i + 1).play(seed=i + 1000)
            _Episode(copies[2], label, other, scripted, seed=i + 2).play(seed=None)
            isolated = _Episode(b, label, plan, scripted, seed=i).play(seed=i, reset=False)
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - any crash is a contract failure, reported with its context
            raise AssertionError(f"{label} plan={plan}: the game raised {type(exc).__name__}: {exc}") from exc
        if fresh.trace != first.trace:
            raise AssertionError(f"{label} plan={plan}: not deterministic: a fresh copy with the same seed and actions diverged at step {_diverges(first.trace, fresh.trace)}")
        if again.trace != first.trace:
            raise AssertionError(f"{label} plan={plan}: reset(seed) does not fully reset: replaying the same seed on the used copy diverged at step {_diverges(first.trace, again.trace)}")
        if isolated.trace != first.trace:
            raise AssertionError(f"{label} plan={plan}: copies share RNG state: playing another copy changed this copy's episode at step {_diverges(first.trace, isolated.trace)}")
        if _global_rng_state() != before:
            raise AssertionError(f"{label} plan={plan}: the game changed the global random / numpy.random state; use self.np_random")


def _stuck(trace: Trace) -> str:
    """The likely cause of an episode that never ends, from its last moves."""
    moves = [entry[:2] for entry in trace if len(entry) > 2 and entry[1] not in ("obs", "messages")]
    last = moves[-8:]
    seats = [seat for seat, _ in last]
    if len(set(seats)) == 1 and len(last) > 2:
        cause = (f"seat {seats[0]!r} was asked again and again: after a seat's step, agent_selection must move on "
                 "(and a seat that has answered must leave ready_agents()), or max_turns is too small")
    else:
        cause = ("the seats kept moving without an end: does step() ever call _end_game (after the last answer, and "
                 "on every invalid move)? is spec.max_turns the most moves an episode can take?")
    return f"{cause}. Last moves: {', '.join(f'{seat}: {str(action)[:20]!r}' for seat, action in last)}"


def _check_render(env_id: str, kwargs: dict[str, Any]) -> None:
    """With ``render_mode="ansi"``, ``render()`` returns a str after a reset (the game's ``_render_text``)."""
    try:
        env = make(env_id, **{**kwargs, "render_mode": "ansi"})
    except TypeError:
        return  # a game without a render_mode argument: PettingZoo's render is optional
    env.reset(seed=0)
    try:
        text = env.render()
    except NotImplementedError:
        raise AssertionError(f"{env_id}: render() with render_mode='ansi' raised NotImplementedError; implement "
                             "_render_text(self) -> str (a one-line summary of the game's state)") from None
    if not isinstance(text, str):
        raise AssertionError(f"{env_id}: render() with render_mode='ansi' must return a str, got {type(text).__name__}")


def _check_spaces(env_id: str, env: CogymEnv | TokenLevelEnv) -> None:
    """cogym's space contract: Dict observation with a numeric "observation" and a Text "text"; Text actions.
    At token level: a numeric token-id "observation" and Discrete(vocab) actions."""
    for agent in env.possible_agents:
        obs_space, act_space = env.observation_space(agent), env.action_space(agent)
        if isinstance(env, TokenLevelEnv):
            ids = obs_space.spaces.get("observation") if isinstance(obs_space, Dict) else None
            if not isinstance(ids, Box) or not np.issubdtype(ids.dtype, np.integer):
                raise AssertionError(f"{env_id} (token level): observation_space({agent!r})['observation'] must be an integer Box of token ids, got {obs_space}")
            if not isinstance(act_space, Discrete) or int(act_space.n) != env.codec.vocab_size:
                raise AssertionError(f"{env_id} (token level): action_space({agent!r}) must be Discrete(vocab_size), got {act_space}")
            continue
        if not isinstance(obs_space, Dict) or not isinstance(obs_space.spaces.get("text"), Text):
            raise AssertionError(f"{env_id}: observation_space({agent!r}) must be a Dict with a Text 'text' entry, got {obs_space}")
        numeric = obs_space.spaces.get("observation")
        if not isinstance(numeric, Box) or not np.issubdtype(numeric.dtype, np.number):
            raise AssertionError(f"{env_id}: observation_space({agent!r})['observation'] must be a numeric Box, got {numeric}")
        if not isinstance(act_space, Text):
            raise AssertionError(f"{env_id}: action_space({agent!r}) must be a Text space (one whole message), got {act_space}")


def _diverges(a: Trace, b: Trace) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"{i}: {str(x)[:200]} != {str(y)[:200]}"
    return f"{min(len(a), len(b))} (one trace is longer: {len(a)} vs {len(b)})"


def prompts_that_depend_on_play(env_id: str, kwargs: dict[str, Any] | None = None, roles: Any = None,
                                seeds: tuple[int, ...] = (0, 1), plays: int = 3) -> dict[str, tuple[str, str]]:
    """Roles whose seats' first prompt of a game can differ between plays of one seed: {role: (one
    prompt, another)}. Each seed is played ``plays`` times by the game's scripted twins (another twin
    and another RNG each time), recording the text each seat is first asked; a role whose text
    differs depends on the other seats' moves (a solver answering a proposer's problem), so the
    games of one seed do not ask it one question. Roles without scripted twins cannot be probed and
    are not reported. Bounded: each play stops after ``spec.max_turns`` moves. An observation that breaks
    the contract raises :class:`~cogym.envs.contract.ContractViolation`."""
    scripted = scripted_strategies(env_id)
    env = make(env_id, **dict(kwargs or {}))
    wanted = set(env.spec.roles if roles is None else roles)
    if not all(scripted.get(r) for r in env.spec.roles):
        return {}
    found: dict[str, tuple[str, str]] = {}
    for seed in seeds:
        seen: list[dict[str, str]] = []
        for k in range(plays):
            rng = seeding.rng("game.checks", [seed, k])
            twins = {r: list(fns.values())[k % len(fns)] for r, fns in scripted.items()}
            env.reset(seed=seed)
            first: dict[str, str] = {}
            for _ in range(env.spec.max_turns + 2 * len(env.possible_agents) + 2):
                if not env.agents:
                    break
                ready = env.ready_agents()
                if not ready:
                    env.step(None)
                    continue
                for a in ready:
                    first.setdefault(a, observed_text(env, a))
                for a in ready:
                    if a not in env.agents or env.terminations[a] or env.truncations[a] or env.agent_selection != a:
                        break
                    env.step(twins[env.role_of(a)](observed_text(env, a), rng))
            seen.append(first)
        for seat in env.possible_agents:
            role = env.role_of(seat)
            texts = [s[seat] for s in seen if seat in s]
            if role in wanted and role not in found and len(set(texts)) > 1:
                a = texts[0]
                found[role] = (a, next(t for t in texts if t != a))
    return found
