"""Playing one batch of a tournament's games: the agents of the players the batch seats (at most
``max_loaded`` models held at once), the batched rollout and each game's row. The driver and
every Ray tournament worker play batches with these."""

from __future__ import annotations

import gc
from pathlib import Path

from cogym.agents.llm import LLMAgent
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.core import seeding
from cogym.core.types import Agent
from cogym.runners.rollout.agents import AgentFactory, twin_name
from cogym.runners.rollout.turns import rollout
from cogym.runners.tournament.players import Player, Prompted
from cogym.runners.tournament.schedule import game_index, GameKey, SoloKey
from cogym.runners.results.scoring import game_score, side_returns
from cogym.runners.tournament.spec import TournamentSpec
from cogym.runners.results.transcripts import tournament_keeps, transcript_row


class Agents:
    """One agent per model player (loaded once), one per (scripted twin, role)."""

    def __init__(self, spec: TournamentSpec) -> None:
        self.spec, self.factory = spec, AgentFactory(spec.game, seed=spec.seed)
        self.cache = self.factory.agents
        # model players (fixed models are kept); an endpoint holds no weights, so it is never unloaded
        self.players = {p.name for p in spec.players if p.twin is None and p.endpoint is None}
        self.loads = 0

    def get(self, who: str | Player, role: str) -> Agent:
        name = who.name if isinstance(who, Player) else who
        twin = who.twin if isinstance(who, Player) else twin_name(who)
        if twin is not None:
            self.factory.check_twin(twin, role, where=name)
            return self.factory.scripted(twin, role, name=f"{name}@{role}")
        if name not in self.cache:
            # A fixed model agent: as settle resolved it (a spec that bypassed settle: a bare model directory).
            own = who if isinstance(who, Player) else self.spec.fixed_players.get(who) or Player(name, path=Path(who))
            path = own.path
            limit = self.spec.max_new_tokens or own.max_new_tokens or SamplingParams.max_new_tokens
            sampling = SamplingParams(max_new_tokens=limit, temperature=self.spec.temperature)
            # A model plays with its own prompts (settle: its run's, --system, or the checkpoints' shared ones).
            wrap = (lambda agent: Prompted(agent, {**own.prompts, **self.spec.prompts})) if own.prompts is not None else None
            if own.endpoint is not None:  # its own limit (settle), the tournament's temperature unless it sets one
                sampling = SamplingParams(max_new_tokens=own.max_new_tokens or limit, temperature=self.spec.temperature)
                # a dead endpoint does not stop the tournament: its failed games are counted on the leaderboard
                self.factory.endpoint(name, own.endpoint, sampling, where=f"player {name!r}", wrap=wrap, stop_when_dead=False)
                return self.cache[name]
            # In the dtype and attention kernel its run used (a bare model directory: the defaults).
            self.factory.model(name, lambda: Policy.from_pretrained(path, name=name, **own.load_options()), sampling,
                               wrap=wrap)
            self.loads += 1
        return self.cache[name]

    def keep_only(self, needed: set[str], max_loaded: int) -> None:
        """With a limit, unload the model players the next batch does not need (fixed seats stay)."""
        loaded = [k for k, a in self.cache.items() if isinstance(a, (LLMAgent, Prompted)) and k in self.players]
        if max_loaded and len(loaded) + len([n for n in needed if n in self.players and n not in self.cache]) > max_loaded:
            for name in loaded:
                if name not in needed:
                    del self.cache[name]

            gc.collect()

    def reseed(self, batch: int) -> None:
        # Every agent loaded so far, scripted ones first, then by name (the order the streams were numbered in before).
        for k, (_, agent) in enumerate(sorted(self.cache.items(), key=lambda kv: (twin_name(kv[0]) is None, kv[0]))):
            if isinstance(agent, ScriptedAgent):
                agent.rng = seeding.rng("tournament.scripted", self.spec.seed, batch, k)


def play_batch(spec: TournamentSpec, batch: list[GameKey], envs: list, agents: Agents, sides: list[list[str]],
                fixed: dict[str, str], seeds: list[int], batch_no: int) -> list[dict]:
    """Play one batch of games (generation shared across them) and return their result rows."""
    by_name = {p.name: p for p in spec.players}
    agents.reseed(batch_no)
    maps, players_of = [], []
    for key in batch:
        seat_of = {s: (key.a if key.order == 0 else key.b) for s in sides[0]}  # paired: the rated seats, key.a = key.b
        seat_of |= {s: (key.b if key.order == 0 else key.a) for s in (sides[1] if len(sides) > 1 else [])}
        players_of.append({**fixed, **seat_of})

        def seat_map(seat, role, seat_of=seat_of):
            who = seat_of.get(seat)
            if who is None:
                return fixed[seat], agents.get(fixed[seat], role)
            return who, agents.get(by_name[who], role)
        maps.append(seat_map)
    seeding.torch_seed("tournament.sampling", spec.seed, batch_no)
    res = rollout(envs[: len(batch)], maps, dict(spec.prompts), [seeds[key.k] for key in batch], episode_prefix=f"t{batch_no}",
                  game_indices=[game_index(key) for key in batch], sampling_key=seeding.key("tournament.key", spec.seed))
    rows = []
    for key, returns in zip(batch, res.returns):
        if isinstance(key, SoloKey):  # paired scoring: the player's own return, compared later seed by seed
            rows.append({"id": key.id, "player": key.player, "k": key.k, "round": key.round, "seed": seeds[key.k],
                         "return": side_returns(returns, sides[0])[0], "returns": dict(returns)})
            continue
        side_a, side_b = (sides[0], sides[1]) if key.order == 0 else (sides[1], sides[0])
        ra, rb = side_returns(returns, side_a, side_b)
        rows.append({"id": key.id, "a": key.a, "b": key.b, "k": key.k, "order": key.order, "round": key.round,
                     "seed": seeds[key.k], "return_a": ra, "return_b": rb, "score": game_score(returns, side_a, side_b)})
    for row, infos, players in zip(rows, res.infos, players_of):  # a seat whose agent made no move (an endpoint that failed): why
        failed = {seat: info["agent_error"] for seat, info in infos.items() if info.get("agent_error")}
        if failed:
            row["agent_errors"] = failed
            row["failed_players"] = sorted({players[seat] for seat in failed if seat in players})  # the leaderboard counts them
    _attach_transcripts(spec, batch, rows, res, batch_no)
    return rows


def _attach_transcripts(spec: TournamentSpec, batch: list[GameKey], rows: list[dict], res, batch_no: int) -> None:
    """Games among their pairing's first ``spec.transcripts`` carry their transcript in their row (under
    ``"transcript"``, which run_tournament moves to transcripts.jsonl): a Ray worker returns it the same way."""
    for key, row, moves, returns in zip(batch, rows, res.moves, res.returns):
        if tournament_keeps(key.k, key.order, spec.transcripts):
            row["transcript"] = transcript_row("tournament", moves, returns, row["seed"], f"t{batch_no}-{game_index(key)}",
                                               key.id, pairing=(key.a, key.b))
