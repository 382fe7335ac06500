"""The training loop: iterations of rollout -> per-policy update, with metrics and checkpoints.

``train(cfg)`` builds the games, policies, agents and learners a config describes, evaluates
held-out solver accuracy, runs ``run.iterations`` iterations with a live progress bar, writes
the run directory, and returns a summary. Layout of a run directory::

    config.yaml          the resolved config
    metrics.jsonl        one line per iteration (and held-out evaluations)
    tb/                  TensorBoard events
    checkpoints/step_N/  policies/<id>/ (HF dirs), learners/<id>/optimizer.pt, trainer_state.json,
                         league/ (with league.seats: members' HF dirs and league.json)
    learning_curve.png   rewards and held-out accuracy over iterations
    summary.json         the final table

Data parallel (``cogym train ... --nproc W``, :mod:`cogym.runners.launch`; or torchrun): rank r
plays games r, r + W, r + 2W, ... of each iteration's game list, with the game seeds of a
one-process run and a sampling stream of its own; right after each rollout every rank gathers all
ranks' results, so metrics, dynamic sampling and the learners see the global batch on every rank.
The learners train data-parallel on it (each rank its share of the rows, gradients averaged: the
same update as one process up to float rounding). Rank 0 alone evaluates, writes metrics,
TensorBoard, plots and the summary, and shows the progress bar; every rank writes its own ZeRO
optimizer partitions into checkpoints. ``game.num_games`` must be divisible by W, and ``--resume``
of a ZeRO checkpoint needs the W that wrote it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import yaml

from cogym.envs.arithmetic import load_heldout
from cogym.learners import distributed as dist
from cogym.learners.engines import ZERO_FILE

from .build import Run, build
from .config import Config, ConfigError
from .evaluate import heldout_accuracy
from .launch import check_data_parallel
from .rollout import RolloutResult, rollout
from .token_rollout import token_rollout

def iteration_seeds(seed: int, iteration: int, n: int) -> list[int]:
    """Game seeds of one iteration: a pure function of (run seed, iteration), so resume replays them."""
    return [int(x) for x in np.random.SeedSequence([seed, iteration]).generate_state(n)]


def grouped(seeds: list[int], group_size: int) -> list[int]:
    """Each seed repeated ``group_size`` times: the episodes of a group start from the same state."""
    return [s for s in seeds for _ in range(group_size)]


def refill_seeds(seed: int, iteration: int, round_: int, n: int) -> list[int]:
    """Game seeds of dynamic sampling's extra rollout ``round_`` (>= 1) of an iteration (round 0 is
    :func:`iteration_seeds`); a pure function, so resume replays them too."""
    return [int(x) for x in np.random.SeedSequence([seed, iteration, round_]).generate_state(n)]


def sampling_seed(seed: int, iteration: int, rank: int = 0) -> int:
    """Seed of the sampling stream of one iteration (replayed exactly on resume); rank r > 0 of a
    data-parallel run draws its own stream."""
    if rank == 0:
        return seed * 100_003 + iteration
    return int(np.random.SeedSequence([seed, iteration, rank]).generate_state(1)[0])


def gather_rollouts(parts: list[RolloutResult], indices: list[list[int]]) -> RolloutResult:
    """The result of the whole game list from each rank's result and its games' places in the list:
    returns and infos in game order, turns in game order (each game's in order of play), generated
    tokens and rollout stats summed, seconds the slowest rank's."""
    n = sum(len(ix) for ix in indices)
    returns: list = [None] * n
    infos: list = [None] * n
    for part, ix in zip(parts, indices):
        for local, g in enumerate(ix):
            returns[g], infos[g] = part.returns[local], part.infos[local]
    turns = sorted((t for part in parts for t in part.turns), key=lambda t: t.game_index)  # stable
    stats: dict = {}
    for part in parts:
        for key, value in part.stats.items():
            stats[key] = stats.get(key, 0) + value
    return RolloutResult(turns=turns, returns=returns, infos=infos,
                         generated_tokens=sum(p.generated_tokens for p in parts),
                         generate_seconds=max(p.generate_seconds for p in parts),
                         seconds=max(p.seconds for p in parts), stats=stats)


def data_parallel(play: Callable) -> Callable:
    """``play`` (rollout or token_rollout) for a data-parallel run: this rank plays games r, r + W,
    r + 2W, ... of the list it is given (with their seeds, episode ids and group keys), then every
    rank gets the result of the whole list (:func:`gather_rollouts`). The identity in one process."""
    world, rank = dist.world_size(), dist.rank()
    if world == 1:
        return play

    def play_shard(games, seat_map, system, seeds, **kwargs) -> RolloutResult:
        shares = [list(range(r, len(games), world)) for r in range(world)]
        mine = shares[rank]
        maps = seat_map if callable(seat_map) else [seat_map[g] for g in mine]  # one map per game (a league)
        res = play([games[g] for g in mine], maps, system, [seeds[g] for g in mine], game_indices=mine, **kwargs)
        return gather_rollouts(dist.all_gather_objects(res), shares)

    return play_shard


def dynamic_sampling(run: Run, play, system: dict, iteration: int, first: RolloutResult,
                     batches: dict[str, list]) -> dict[str, float]:
    """DAPO dynamic sampling (ALGORITHMS.md §7.2) for every learner that enables it: drop the groups
    its predicate rejects and play more episodes until as many groups pass as the first rollout
    made (at most ``max_sampling_rounds`` rollouts in all), then keep the first that many passing
    groups. Replaces those learners' entries of ``batches`` in place; returns metrics. A learner
    still short after its last round trains on the groups that passed (``<pid>/ds_short`` = 1)."""
    from cogym.learners.dapo import select_groups

    ds = {pid: lr for pid, lr in run.learners.items() if lr.cfg.dynamic_sampling != "off"}
    if not ds:
        return {}
    pool = {pid: list(batches[pid]) for pid in ds}
    target = {pid: len({t.group_key for t in batches[pid]}) for pid in ds}
    decisions = {pid: lr.group_decisions(pool[pid]) for pid, lr in ds.items()}
    rounds = 1

    def short() -> list[str]:
        return [pid for pid, lr in ds.items()
                if sum(decisions[pid].values()) < target[pid] and rounds < lr.cfg.max_sampling_rounds]

    while short():
        k = run.cfg.game.group_size
        seeds = grouped(refill_seeds(run.cfg.run.seed, iteration, rounds, len(run.games) // k), k)
        seat_map, opponents = league_maps(run, iteration, rounds)
        res = play(run.games, seat_map, system, seeds, episode_prefix=f"it{iteration}r{rounds}", group_size=k)
        if run.league is not None:
            run.league.record(res.returns, opponents, iteration)
        for pid in short():
            new = [t for t in res.turns if t.policy_id == pid]
            pool[pid] += new
            decisions[pid].update(ds[pid].group_decisions(new))
        rounds += 1
    m: dict[str, float] = {}
    for pid in ds:
        chosen = set(select_groups(decisions[pid], target[pid]))
        batches[pid] = [t for t in pool[pid] if t.group_key in chosen]
        m[f"{pid}/ds_rounds"] = float(rounds)
        m[f"{pid}/ds_pass_rate"] = sum(decisions[pid].values()) / max(len(decisions[pid]), 1)
        m[f"{pid}/ds_groups"] = float(len(chosen))
        m[f"{pid}/ds_short"] = float(len(chosen) < target[pid])
    return m


def league_maps(run: Run, iteration: int, round_: int = 0) -> tuple:
    """The seat map(s) of one rollout: the config's, or with a league one per game (its league seats
    played by the game's opponent, :mod:`cogym.runners.league`), and each game's opponent."""
    if run.league is None:
        return run.seat_map, None
    return run.league.assign(run.seat_map, iteration, len(run.games), run.cfg.game.group_size, round_)


def rollout_metrics(res: RolloutResult, roles: tuple[str, ...]) -> dict[str, float]:
    m: dict[str, float] = {}
    for role in roles:
        infos = [(g, seat, i) for g, seats in enumerate(res.infos) for seat, i in seats.items() if i.get("role") == role]
        # Seats whose info says correct=None never answered (the game ended before their turn).
        played = [(g, seat, i) for g, seat, i in infos if i.get("correct", True) is not None]
        if played:
            m[f"{role}/reward"] = float(np.mean([res.returns[g].get(seat, 0.0) for g, seat, _ in played]))
        answered = [i["correct"] for _, _, i in played if "correct" in i]
        if answered:
            m[f"{role}/correct"] = float(np.mean(answered))
        if any("invalid" in i for _, _, i in infos):
            m[f"{role}/invalid"] = float(np.mean([bool(i.get("invalid")) for _, _, i in infos]))
        # Game-declared end-of-game metrics: infos[seat]["metrics"] = {name: float | bool | None};
        # None means "not defined for this episode" and is left out of the mean.
        values: dict[str, list[float]] = {}
        for _, _, i in infos:
            for key, v in (i.get("metrics") or {}).items():
                if v is not None:
                    values.setdefault(key, []).append(float(v))
        for key, vs in values.items():
            m[f"{role}/{key}"] = float(np.mean(vs))
    m["tokens_per_s"] = res.generated_tokens / max(res.generate_seconds, 1e-9)
    m["rollout_s"] = res.seconds
    m["turns"] = float(len(res.turns))
    for key, value in res.stats.items():  # e.g. token level: ids the models read, cache restarts
        m[f"rollout/{key}"] = float(value)
    return m


def retokenize_mismatch(policy, turns) -> float:
    """Fraction of turns whose decoded text does not re-encode to the generated ids.

    Training always uses the generated ids (token-in, token-out); this only measures how far a
    decode-then-re-encode pipeline would have drifted.
    """
    eos = set(policy.eos_ids)
    bad = 0
    for t in turns:
        ids = [i for i in t.response_ids if i not in eos]
        bad += policy.tokenizer.encode(t.text, add_special_tokens=False) != ids
    return bad / len(turns)


class RunDir:
    """The run directory: resolved config, metrics (JSONL + TensorBoard), checkpoints, plots."""

    def __init__(self, path: Path, cfg: Config, tensorboard: bool, start_iteration: int = 1) -> None:
        """On resume (``start_iteration > 1``) rows logged after the checkpoint are dropped, so
        replayed iterations appear once in metrics.jsonl and TensorBoard."""
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        metrics = path / "metrics.jsonl"
        if start_iteration > 1 and metrics.is_file():
            keep = [line for line in metrics.read_text().splitlines()
                    if line.strip() and json.loads(line).get("iteration", 0) < start_iteration]
            metrics.write_text("".join(line + "\n" for line in keep))
        self.metrics_file = open(metrics, "a")
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(path / "tb"), purge_step=start_iteration if start_iteration > 1 else None)

    def first(self, key: str):
        """The first logged value of ``key`` (e.g. held-out accuracy before training), or None."""
        for line in (self.path / "metrics.jsonl").read_text().splitlines():
            if line.strip() and key in (row := json.loads(line)):
                return row[key]
        return None

    def log(self, record: dict) -> None:
        self.metrics_file.write(json.dumps(record) + "\n")
        self.metrics_file.flush()
        if self.tb is not None:
            step = int(record.get("iteration", 0))
            for k, v in record.items():
                if k != "iteration" and isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        self.metrics_file.close()
        if self.tb is not None:
            self.tb.close()

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"


class RankRunDir:
    """The run directory as a data-parallel rank r > 0 sees it: it logs nothing (rank 0 writes
    metrics, TensorBoard, plots and the summary) and only adds its parts to checkpoints."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def first(self, key: str):
        return None

    def log(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"


def save_checkpoint(run: Run, run_dir: RunDir | RankRunDir, iteration: int) -> Path:
    """Write checkpoints/step_N atomically: build it in a temp dir, then rename.

    In a data-parallel run every rank calls this: rank 0 writes the checkpoint; rank r > 0 saves its
    learners into a scratch dir and moves what only it holds (its ZeRO optimizer partitions,
    ``zero_optimizer.rank{r}.pt``) into rank 0's temp dir; rank 0 renames after a barrier. (Policy
    weights are the same on every rank; ZeRO-3, whose saves would gather, is refused with W > 1.)
    """
    final = run_dir.checkpoints / f"step_{iteration:06d}"
    tmp = run_dir.checkpoints / f".tmp_step_{iteration:06d}"
    rank = dist.rank()
    if rank == 0 and tmp.exists():
        shutil.rmtree(tmp)
    dist.barrier()
    out = tmp if rank == 0 else run_dir.checkpoints / f".tmp_step_{iteration:06d}.rank{rank}"
    if rank == 0:
        for pid, policy in run.policies.items():
            policy.save(tmp / "policies" / pid)
        if run.league is not None:
            run.league.save(tmp / "league")  # its members (HF dirs), win counts and ratings
    elif out.exists():
        shutil.rmtree(out)
    for pid, learner in run.learners.items():
        learner.save(out / "learners" / pid)  # optimizer, critic, PRM, RAE baselines, step count
    if rank:
        for part in sorted(out.rglob(ZERO_FILE.format(rank=rank))):
            dest = tmp / part.relative_to(out)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, dest)
        shutil.rmtree(out)
    dist.barrier()
    if rank == 0:
        state = {"iteration": iteration, "seed": run.cfg.run.seed, "world_size": dist.world_size()}
        (tmp / "trainer_state.json").write_text(json.dumps(state))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    dist.barrier()
    return final


def check_resume_world(ckpt: Path, world: int) -> None:
    """Resume with as many processes as wrote the checkpoint: ZeRO optimizer state is one file per
    rank, and each rank's sampling stream depends on the process count (a replay needs the same)."""
    ranks = {p.name for p in ckpt.rglob(ZERO_FILE.format(rank="*"))}
    prefix, suffix = ZERO_FILE.split("{rank}")
    count = len({int(name[len(prefix):-len(suffix)]) for name in ranks})
    count = count or int(json.loads((ckpt / "trainer_state.json").read_text()).get("world_size", 1))
    if count != world:
        how = f"--nproc {count}" if count > 1 else "no --nproc"
        raise ConfigError(f"--resume: {ckpt} was written by {count} process(es), and this run has {world}; resume it "
                          f"with {how} (ZeRO partitions and each rank's sampling stream depend on the count)")


def last_checkpoint(run_path: Path) -> Path | None:
    ckpts = sorted(p for p in (run_path / "checkpoints").glob("step_*") if (p / "trainer_state.json").is_file())
    return ckpts[-1] if ckpts else None


def _heldout(run: Run) -> float | None:
    cfg = run.cfg
    if not cfg.eval.heldout or "solver" not in run.roles:
        return None
    policy = run.policy_for_role("solver")
    if policy is None:
        return None
    records = load_heldout()[: cfg.eval.size]
    system = cfg.prompts.get("solver").system if "solver" in cfg.prompts else ""
    return heldout_accuracy(policy, records, system, max_new_tokens=cfg.eval.max_new_tokens)


def plot_learning_curve(metrics_path: Path, out: Path, roles: tuple[str, ...]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    its = [r for r in rows if "rollout_s" in r]
    evals = [r for r in rows if "heldout_acc" in r]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for role in roles:
        xs = [r["iteration"] for r in its if f"{role}/reward" in r]
        ys = [r[f"{role}/reward"] for r in its if f"{role}/reward" in r]
        if xs:
            line, = ax.plot(xs, ys, alpha=0.25)
            k = max(1, len(ys) // 40)  # moving average so the trend shows through sampling noise
            smooth = np.convolve(ys, np.ones(k) / k, mode="valid")
            ax.plot(xs[k - 1:], smooth, color=line.get_color(), label=f"{role} reward (mean of {k})")
    if evals:
        ax.plot([r["iteration"] for r in evals], [r["heldout_acc"] for r in evals], "ko--",
                label="held-out solver accuracy (greedy)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward / accuracy")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(metrics_path.parent.name)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def _mean_last(rows: list[dict], key: str, k: int = 5) -> float | None:
    vals = [r[key] for r in rows if key in r]
    return float(np.mean(vals[-k:])) if vals else None


def train(cfg: Config, run_path: Path | None = None, resume: bool = False, progress: bool = True) -> dict:
    """Run a whole training job; return the summary (also written to summary.json)."""
    t_start = time.time()
    run_path = Path(run_path) if run_path else Path(cfg.run.out_dir) / f"{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if dist.world_size() > 1:  # a data-parallel worker: every rank writes to rank 0's run directory
        check_data_parallel(cfg, dist.world_size())
        run_path = Path(dist.broadcast_object(str(run_path)))
    start_it, policy_dirs, ckpt = 1, None, None
    if resume:
        ckpt = last_checkpoint(run_path)
        if ckpt is None:
            raise FileNotFoundError(f"--resume: no complete checkpoint under {run_path / 'checkpoints'}")
        check_resume_world(ckpt, dist.world_size())
        start_it = json.loads((ckpt / "trainer_state.json").read_text())["iteration"] + 1
        policy_dirs = {pid: ckpt / "policies" / pid for pid in cfg.policies}
    threads = cfg.run.threads or (1 if cfg.game.granularity == "token" else 0)
    threads_before = torch.get_num_threads()
    if threads:
        # Token-level play is many small forwards (one id a row, a forward a step): splitting each across
        # threads costs more than it saves, and under CPU contention OpenMP's spin-waits make it tens of
        # times slower.
        torch.set_num_threads(threads)
    try:
        return _train(cfg, run_path, start_it, policy_dirs, ckpt, t_start, progress)
    finally:
        torch.set_num_threads(threads_before)


def _train(cfg: Config, run_path: Path, start_it: int, policy_dirs: dict | None, ckpt: Path | None, t_start: float,
           progress: bool) -> dict:
    critic_dirs = {pid: ckpt / "learners" / pid / "critic" for pid in cfg.policies} if ckpt is not None else None
    run = build(cfg, policy_dirs, critic_dirs)
    if ckpt is not None:
        for pid, learner in run.learners.items():
            learner.load(ckpt / "learners" / pid)
    main = dist.is_main()  # data parallel: rank 0 evaluates, logs, plots and shows progress
    rd = RunDir(run_path, cfg, cfg.run.tensorboard, start_iteration=start_it) if main else RankRunDir(run_path)
    if run.league is not None:
        run.league.start(start_it - 1, ckpt)
    engines = sorted({lr.engine.name for lr in run.learners.values()}) or ["none (all frozen)"]
    history: list[dict] = []
    summary: dict = {"run_dir": str(run_path), "engines": engines}
    try:
        acc0 = (_heldout(run) if start_it == 1 else rd.first("heldout_acc")) if main else None
        if acc0 is not None:
            if start_it == 1:
                rd.log({"iteration": 0, "heldout_acc": acc0})
            summary["heldout_acc_before"] = acc0
        from tqdm.auto import tqdm

        bar = tqdm(range(start_it, cfg.run.iterations + 1), desc=cfg.run.name, unit="it", disable=not (progress and main),
                   initial=start_it - 1, total=cfg.run.iterations, dynamic_ncols=True)
        system = {role: p.system for role, p in cfg.prompts.items()}
        play = data_parallel(token_rollout if cfg.game.granularity == "token" else rollout)
        for it in bar:
            torch.manual_seed(sampling_seed(cfg.run.seed, it, dist.rank()))  # replayed exactly on resume
            group_size = cfg.game.group_size
            seeds = grouped(iteration_seeds(cfg.run.seed, it, len(run.games) // group_size), group_size)
            run.reseed_scripted(it, dist.rank())
            seat_map, opponents = league_maps(run, it)
            res = play(run.games, seat_map, system, seeds, episode_prefix=f"it{it}", group_size=group_size)
            rec = {"iteration": it, **rollout_metrics(res, run.roles)}
            if run.league is not None:
                rec.update(run.league.record(res.returns, opponents, it))
            batches = {pid: [t for t in res.turns if t.policy_id == pid] for pid in run.learners}
            rec.update(dynamic_sampling(run, play, system, it, res, batches))
            t_up = time.perf_counter()
            for pid, learner in run.learners.items():
                turns = batches[pid]
                if turns and main:
                    rec[f"{pid}/retokenize_mismatch"] = retokenize_mismatch(run.policies[pid], turns)
                for k, v in learner.update(turns).items():
                    rec[f"{pid}/{k}"] = v
            rec["update_s"] = time.perf_counter() - t_up
            if run.league is not None:
                run.league.after_update(it)  # a snapshot every league.every iterations
            if main and cfg.run.eval_every and it % cfg.run.eval_every == 0 and it != cfg.run.iterations:
                rec["heldout_acc"] = _heldout(run)
            rd.log(rec)
            history.append(rec)
            bar.set_postfix({k.replace("/reward", ""): f"{rec[k]:.2f}" for k in rec if k.endswith("/reward")}
                            | {"tok/s": f"{rec['tokens_per_s']:.0f}"})
            if cfg.run.checkpoint_every and it % cfg.run.checkpoint_every == 0:
                save_checkpoint(run, rd, it)
        bar.close()
        missed = not (rd.checkpoints / f"step_{cfg.run.iterations:06d}").is_dir()
        if cfg.run.checkpoint_every and dist.broadcast_object(missed):
            save_checkpoint(run, rd, cfg.run.iterations)  # the final state, when the cadence missed it
        acc1 = _heldout(run) if main else None
        if acc1 is not None:
            rd.log({"iteration": cfg.run.iterations, "heldout_acc": acc1})
            summary["heldout_acc_after"] = acc1
        for role in run.roles:
            first = [r[f"{role}/reward"] for r in history[:5] if f"{role}/reward" in r]
            last = _mean_last(history, f"{role}/reward")
            if last is not None:
                summary[f"{role}_reward_first5"] = float(np.mean(first)) if first else None
                summary[f"{role}_reward_last5"] = last
        summary["iterations"] = cfg.run.iterations
        summary["tokens_per_s"] = _mean_last(history, "tokens_per_s", k=len(history) or 1)
        if run.league is not None:
            summary["league"] = run.league.leaderboard()
    finally:
        summary["wall_s"] = round(time.time() - t_start, 1)
        rd.close()
        if main:
            if cfg.run.plot and (run_path / "metrics.jsonl").stat().st_size:
                plot_learning_curve(run_path / "metrics.jsonl", run_path / "learning_curve.png", run.roles)
            (run_path / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
