"""Tournaments between checkpoints, models and scripted agents: schedules, an append-only results
log, ratings with confidence intervals, a leaderboard and plots.

A *player* is a checkpoint's policy (``runs/x/checkpoints/step_000200``, or a run directory: every
complete checkpoint in it), any HF model directory, or a scripted twin (``scripted:nash``). Two
players meet in a *pairing*: each takes one *side* of the game (a set of seats; by default, for a
game whose players are two seats, one seat each, and for a game with several seats of one role,
half of them each), and every other seat is played by a *fixed* agent (``fixed: {judge:
scripted:oracle}``). A pairing is ``games_per_pairing`` games: ``games_per_pairing / 2`` seeds, each
played once in each seat order, so both orders of a pair see the same problems and deals. A game's
result is the sign of the difference of the two sides' returns (a draw when equal).

That is *competitive* scoring. A cooperative game, or a game whose roles do different jobs, is
rated with *paired* scoring (:data:`SCORINGS`; binding players to seats makes it the default, and a
game declares its own default with a class attribute ``tournament_scoring = "paired"``): every
player is bound to the same seats (``--role hinter``, or ``PLAYER@ROLE`` / ``PLAYER@SEAT,SEAT``),
every other seat has a fixed agent, and each player plays each of the ``games_per_pairing / 2``
seeds once in those seats with the same fixed partners. A player's game on a seed is shared by all
its pairings; a pairing's result on a seed is the sign of the difference of the two players' own
returns there, a win, draw or loss per seed, rated by the same Bradley–Terry fit.

Everything is checked before the first game (:func:`settle`): each player's twin exists for every
role it plays, bound roles and seats exist, ``fixed`` names only seats or roles and never a seat a
player takes, and every model player has a system prompt per role and a message limit: its run's
(``config.yaml`` next to a checkpoint), ``--system`` / ``--max-new-tokens``, or, for a model with no
run config (``tiny``, an HF directory), the ones the tournament's checkpoints share; anything else
is an error. ``tournament.json`` records each player's seats, prompts and limit and where they came
from, and the notes the CLI prints under the leaderboard (:func:`settings_notes`).

Every finished game is one line of ``results.jsonl`` in the output directory, written and flushed
as each batch of games ends; running the same tournament again skips the games already there, so
a killed run loses at most the batch in flight. Games of a batch run in parallel, and all games in
which the same player sits share one generate call (:func:`cogym.runners.rollout.turns.rollout` batches
by agent). Every draw of a game (tokens, scripted moves) derives from the tournament seed and the
game's id (:func:`game_index`), so a game ends the same in any batch, on a rerun, and on any of
``ray.num_rollout_workers`` Ray workers (``cogym tournament --ray``: the driver splits each batch
among them, restarts one that dies, replays its share, and alone writes ``results.jsonl``).
Ratings are Bradley–Terry by maximum likelihood with bootstrap intervals
(:mod:`cogym.runners.results.ratings`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable, Sequence

import torch
from tqdm.auto import tqdm

from cogym.envs import make
from cogym.core.threads import ThreadPolicy
from cogym.runners import rundir
from cogym.runners.config.validate import make_game
from cogym.runners.tournament.play import Agents, play_batch
from cogym.runners.tournament.players import Player
from cogym.runners.tournament.results import count, RESULTS_FILE, ResultsLog, write_json
from cogym.runners.tournament.schedule import batches, game_seeds, GameKey, Schedule, SoloKey
from cogym.runners.results.leaderboard import NO_RUN_CONFIG
from cogym.runners.results.scoring import paired_rows
from cogym.runners.tournament.settle import check_players, check_spec, settle
from cogym.runners.tournament.spec import TournamentSpec
from cogym.runners.results.transcripts import append_transcripts, split_transcripts, TRANSCRIPTS_FILE


def _player_info(p: Player, seats: Sequence[str]) -> dict:
    """What tournament.json records of a player: what it is, its seats, prompts and limit, and their sources."""
    kind = "scripted" if p.twin is not None else "endpoint" if p.endpoint else "checkpoint" if p.run_config else NO_RUN_CONFIG
    info = {"kind": kind, "path": str(p.path) if p.path else None, "seats": list(seats)}
    if p.endpoint is not None:  # the variable's name only: the key is read when a request is made
        info["endpoint"] = {"base_url": p.endpoint.base_url, "model": p.endpoint.model, "api_key_env": p.endpoint.api_key_env}
    if p.twin is None:
        roles = list((p.sources or {}).get("prompts", {}))
        info |= {"prompts": {r: (p.prompts or {}).get(r, "") for r in roles}, "max_new_tokens": p.max_new_tokens,
                 "sources": p.sources}
    return info


def _notes(players: Sequence[Player]) -> list[str]:
    """What the leaderboard must say about the players' settings: models with no run config, and
    prompts or limits that differ between model players."""
    models = [p for p in players if p.twin is None and p.sources is not None]
    notes = []
    said = {"checkpoints": "the checkpoints' shared"}
    for p in models:
        if p.endpoint is not None:
            notes.append(f"{p.name}: endpoint {p.endpoint.model} at {p.endpoint.base_url}; its replies are not "
                         "reproducible, and a failed request is an invalid move (results.jsonl: agent_errors)")
        elif not p.run_config:
            roles = ", ".join(f"{r} with {p.prompts.get(r, '')!r} ({said.get(src, src)})"
                              for r, src in p.sources["prompts"].items())
            limit = p.sources["max_new_tokens"]
            notes.append(f"* {p.name}: a model with no run config; plays {roles}, limit {p.max_new_tokens} tokens "
                         f"({said.get(limit, limit)})")
    roles = list(dict.fromkeys(r for p in models for r in p.sources["prompts"]))
    for role in roles:
        seen: dict[str, list[str]] = {}
        for p in models:
            if role in p.sources["prompts"]:
                seen.setdefault(p.prompts.get(role, ""), []).append(p.name)
        if len(seen) > 1:
            notes.append(f"players see different system prompts for role {role}: " + "; ".join(
                f"{text!r} ({count(names)})" for text, names in seen.items()) + "; ratings compare prompts too")
    limits: dict[int, list[str]] = {}
    for p in models:
        limits.setdefault(p.max_new_tokens, []).append(p.name)
    if len(limits) > 1:
        notes.append("players have different message limits: " + "; ".join(
            f"{n} tokens ({count(names)})" for n, names in sorted(limits.items())))
    return notes


# Settings a tournament.json written before they existed was played with.
_SETTING_DEFAULTS = {"scoring": "competitive", "rated": None}


def _record_settings(spec: TournamentSpec, out_dir: Path, settings: dict, extra: dict | None = None) -> None:
    """Write tournament.json; refuse a directory whose games were played under other outcome-deciding
    settings. ``extra``: more to record (the players' settings, the notes)."""
    info_file = out_dir / "tournament.json"
    if info_file.is_file() and (out_dir / RESULTS_FILE).is_file() and (out_dir / RESULTS_FILE).stat().st_size:
        try:
            before = rundir.parse_json(rundir.read_text(info_file))  # depth and number size bounded
        except ValueError:
            before = {}
        before = before.get("settings", {}) if isinstance(before, dict) else {}
        before = before if isinstance(before, dict) else {}
        changed = sorted(k for k in settings if json.dumps(before.get(k, _SETTING_DEFAULTS.get(k)), sort_keys=True)
                         != json.dumps(settings[k], sort_keys=True))
        if before and changed:
            raise rundir.RunDirError(f"{out_dir} holds games played with other settings ({', '.join(changed)} differ); "
                                     "use another --out, or add --overwrite to start it over")
    write_json(info_file, {"settings": settings, "schedule": spec.schedule, "games_per_pairing": spec.games_per_pairing,
                            "players": {p.name: str(p.path) if p.path else p.name for p in spec.players}, **(extra or {})})


def run_tournament(spec: TournamentSpec, out_dir: Path, progress: bool = True,
                   on_batch: Callable[[int], None] | None = None, ray=None, overwrite: bool = False) -> list[dict]:
    """Play every scheduled game not yet in ``out_dir/results.jsonl``; return all results.

    ``on_batch(i)`` is called after batch ``i`` is written (tests use it to simulate a kill).
    ``ray``: a :class:`~cogym.runners.config.schema.RayConfig`; its ``num_rollout_workers`` Ray actors play
    each batch's games (:class:`~cogym.runners.ray.tournament.RayTournament`) with the same results.
    ``out_dir`` is guarded (:mod:`cogym.runners.rundir`): a directory holding files that cogym tournament
    did not write is refused unless ``overwrite``, which starts the tournament's own files over
    (results.jsonl, transcripts.jsonl, schedule.json) and keeps every other file."""
    out_dir = Path(out_dir)
    rundir.claim(out_dir, "tournament", "--out", overwrite=overwrite)
    check_spec(spec)
    probe = make_game(spec.game, spec.game_kwargs, "--game")
    spec, sides, fixed = settle(spec, probe)  # every player and seat checked before the first game
    check_players(spec)
    paired = spec.scoring == "paired"
    rundir.create(out_dir, "tournament", "--out")
    if overwrite:  # the games of an earlier tournament here are not this one's: its own files start over
        for name in (RESULTS_FILE, TRANSCRIPTS_FILE):
            rundir.write_text(out_dir / name, "")
        rundir.write_json(out_dir / "schedule.json", {})
    rundir.drop_torn_tail(out_dir / TRANSCRIPTS_FILE)  # appended to below (results.jsonl: ResultsLog drops its own)
    # What decides a game's outcome: a rerun in the same directory must play under the same settings.
    seats_of = {**{p.name: [s for side in sides for s in side] for p in spec.players},
                **{who: [s for s, w in fixed.items() if w == who] for who in spec.fixed_players}}
    info = {"players": {p.name: _player_info(p, seats_of[p.name]) for p in spec.players},
            "fixed_models": {w: _player_info(p, seats_of[w]) for w, p in spec.fixed_players.items()},
            "notes": _notes([*spec.players, *spec.fixed_players.values()])}
    _record_settings(spec, out_dir, {"game": spec.game, "game_kwargs": spec.game_kwargs, "scoring": spec.scoring,
                                     "sides": None if paired else sides, "rated": sides[0] if paired else None,
                                     "fixed": fixed, "seed": spec.seed, "temperature": spec.temperature,
                                     "max_new_tokens": spec.max_new_tokens, "prompts": spec.prompts}, info)
    log, agents, schedule = ResultsLog(out_dir / RESULTS_FILE), Agents(spec), Schedule(spec, out_dir)
    seeds = game_seeds(spec.seed, spec.games_per_pairing // 2)
    names = [p.name for p in spec.players]
    models = {p.name for p in spec.players if p.twin is None and p.endpoint is None}  # what max_loaded counts
    swiss = spec.schedule == "swiss"
    rounds = 1 if not swiss else (spec.swiss_rounds or min(math.ceil(math.log2(len(names))) + 1, len(names) - 1))
    envs: list = []

    def play(batch: list[GameKey], batch_no: int) -> list[dict]:
        if pool is not None:  # the workers hold their own agents and games
            return pool.play(batch, seeds, batch_no)
        threads.adjust()  # fewer torch threads while other processes load this process's cores (core/threads.py)
        agents.keep_only({k.a for k in batch} | {k.b for k in batch}, spec.max_loaded)
        envs.extend(make(spec.game, **spec.game_kwargs) for _ in range(len(batch) - len(envs)))
        return play_batch(spec, batch, envs, agents, sides, fixed, seeds, batch_no)

    if ray is not None:
        from cogym.runners.ray.tournament import RayTournament

        pool = RayTournament(spec, ray, spec.modules)
    else:
        pool = None
    batch_no = 0
    threads_before = torch.get_num_threads()
    threads = ThreadPolicy(ceiling=threads_before)
    try:
        for round_no in range(rounds):
            pairs = schedule.pairs(round_no, log)
            if paired:  # each player of the round plays each seed once; its pairings share those games
                playing = [n for n in names if any(n in pair for pair in pairs)]
                keys = [SoloKey(n, k, round_no if swiss else None) for n in playing for k in range(len(seeds))]
            else:
                keys = [GameKey(a, b, k, o, round_no if swiss else None) for a, b in pairs
                        for k in range(len(seeds)) for o in (0, 1)]
            todo = [key for key in keys if key.id not in log.done]
            bar = tqdm(total=len(keys), initial=len(keys) - len(todo), disable=not progress, unit="game",
                       desc=f"{spec.game} round {round_no + 1}/{rounds}" if rounds > 1 else spec.game, dynamic_ncols=True)
            for batch in batches(todo, spec.batch_games, spec.max_loaded, models):
                rows, transcripts = split_transcripts(play(batch, batch_no))
                append_transcripts(out_dir / TRANSCRIPTS_FILE, transcripts)  # first: a kill then replays, never loses, one
                log.append(rows)  # the driver alone writes results.jsonl
                bar.update(len(batch))
                if on_batch is not None:
                    on_batch(batch_no)
                batch_no += 1
            bar.close()
    finally:
        torch.set_num_threads(threads_before)
        if pool is not None:
            pool.close()
    # Only this tournament's games (a directory reused with other players or more games keeps those too).
    if paired:
        return paired_rows(log.rows, schedule.rounds[:rounds], len(seeds), swiss)
    return [r for r in log.rows if r.get("a") in names and r.get("b") in names and r["k"] < len(seeds)
            and (r.get("round") is not None) == swiss]
