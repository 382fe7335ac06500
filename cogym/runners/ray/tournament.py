"""``cogym tournament --ray``: tournament workers each play a contiguous share of every batch of games;
the driver gathers the rows and alone writes them."""

from __future__ import annotations

import os
from typing import Sequence

from cogym.envs import make
from cogym.runners.ray.pool import actor_threads, ActorPool, adjust_threads, driver_env, enter, node_ip, say
from cogym.runners.tournament.play import Agents, play_batch
from cogym.runners.tournament.settle import sides_and_fixed
from cogym.runners.train.build import import_game_modules


# ------------------------------------------------------------------------------------------ tournaments
class TournamentWorker:
    """A Ray actor of ``cogym tournament --ray``: its own players (loaded as its shares need them, at
    most ``spec.max_loaded`` at once) and games; plays shares of batches and returns their result rows."""

    def __init__(self, spec, index: int, cwd: str, env: dict[str, str], threads: int, modules: list[str]) -> None:
        enter(cwd, env, threads, pinned=False)

        import_game_modules(modules)  # games registered by --module / modules: in the driver
        self.spec, self.index, self.agents, self.envs = spec, index, Agents(spec), []
        self.sides, self.fixed = sides_and_fixed(spec, make(spec.game, **spec.game_kwargs))

    def ping(self) -> dict:
        return {"pid": os.getpid(), "node": node_ip()}

    def play(self, batch: list, seeds: list[int], batch_no: int) -> list[dict]:
        adjust_threads()
        spec = self.spec
        self.agents.keep_only({k.a for k in batch} | {k.b for k in batch}, spec.max_loaded)
        self.envs.extend(make(spec.game, **spec.game_kwargs) for _ in range(len(batch) - len(self.envs)))
        return play_batch(spec, batch, self.envs, self.agents, self.sides, self.fixed, seeds, batch_no)


class RayTournament(ActorPool):
    """The driver's side of ``cogym tournament --ray``: each batch is cut into one contiguous share per
    worker (a pairing's games stay together, so a worker loads few players); a worker that dies is
    restarted and its share replayed, and only a whole batch's rows reach ``results.jsonl``. Every
    game's draws are keyed by its id, so the rows are those of a one-process tournament."""

    def __init__(self, spec, rc, modules: Sequence[str] = ()) -> None:
        threads = actor_threads(rc.num_cpus)
        env = driver_env()
        super().__init__(rc, TournamentWorker, lambda i: (spec, i, os.getcwd(), env, threads, list(modules)),
                         kind="tournament worker")

    def play(self, batch: list, seeds: list[int], batch_no: int) -> list[dict]:
        w = len(self.workers)
        cuts = [round(len(batch) * r / w) for r in range(w + 1)]
        shares = {r: batch[cuts[r]:cuts[r + 1]] for r in range(w) if cuts[r + 1] > cuts[r]}

        def replay(r: int):
            say(f"replaying {len(shares[r])} games of tournament batch {batch_no} on worker {r}")
            return self.workers[r].play.remote(shares[r], seeds, batch_no)

        refs = {self.workers[r].play.remote(share, seeds, batch_no): r for r, share in shares.items()}
        results = self.gather(refs, replay, f"tournament batch {batch_no}")
        return [row for r in sorted(results) for row in results[r]]
