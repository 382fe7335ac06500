"""The training loop: iterations of sampling -> per-policy update, with metrics, evaluations and checkpoints.

``train(cfg)`` builds what a config describes (:mod:`~cogym.runners.train.build`), runs its evaluators,
then ``run.iterations`` iterations with a live progress bar, and returns the summary. The loop
only sequences small parts, each in its own module:

- the execution (:mod:`~cogym.runners.train.execution`, picked by ``run.backend``): where rollouts and
  updates run (this process, ``--nproc`` ranks, or workers and actors elsewhere), and how new weights
  reach the players;
- sampling (:mod:`~cogym.runners.train.iteration`): the rollout, data-parallel when there are several
  processes, one iteration ahead with ``run.async: one_step``, and DAPO's dynamic-sampling refill;
- the learners (:mod:`cogym.learners`): one update per trained policy;
- training hooks (:mod:`~cogym.runners.train.hooks`; a league is one): who plays the seats, and what
  happens after a rollout and an update;
- evaluators (:mod:`~cogym.runners.evaluation.evaluators`): before, every ``run.eval_every``, and after;
- checkpoints (:mod:`~cogym.runners.train.checkpoint`) and metric sinks (:mod:`~cogym.runners.train.sinks`);
- stages (:mod:`~cogym.runners.train.stages`): a config with ``stages`` trains them in order, each from the
  checkpoint the one before wrote at its last iteration, as a resumed run would.

Layout of a run directory::

    config.yaml          the resolved config
    metrics.jsonl        one line per iteration (and the evaluations before and after)
    transcripts.jsonl    the full messages of a few games every run.transcripts_every iterations (`cogym show`)
    tb/                  TensorBoard events
    checkpoints/step_N/  policies/<id>/ (HF dirs), learners/<id>/ (optimizer, algorithm state),
                         trainer_state.json, league/ (with league.seats: members' HF dirs and league.json)
    learning_curve.png   rewards and evaluations over iterations
    summary.json         the final table

Data parallel (``cogym train ... --nproc W``, :mod:`cogym.runners.train.launch`; or torchrun): rank r
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

import dataclasses
import json
import pickle
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from cogym.agents.conversation import continuity_breaks
from cogym.core.errors import GameStepError, LearnerDied
from cogym.learners import torch_dist as dist

from cogym.runners.train.backends import execution_for
from cogym.runners.train.build import Run, build
from cogym.runners import rundir
from cogym.runners.train.checkpoint import check_resume_world, last_checkpoint, read_trainer_state, remove_checkpoints, \
    save_checkpoint, unowned_after
from cogym.runners.config.schema import Config
from cogym.runners.config.validate import check_data_parallel
from cogym.runners.evaluation.evaluators import evaluate
from cogym.runners.train.hooks import TrainHook
from cogym.runners.train.execution import Execution, Trained
from cogym.runners.train.idle import IdlePolicies
from cogym.runners.train.league import LeagueHook
from cogym.runners.train.metrics import mean_last, retokenize_mismatch, reward_summary
from cogym.runners.train.iteration import Sampler, mixed_prompt_groups
from cogym.runners.train.sinks import forget_attempt, Sinks, open_sinks
from cogym.runners.train.stages import check_resume, plan, Stage, StageHook, step_dir
from cogym.core.threads import cpu_capacity, ThreadPolicy
from cogym.runners.results.transcripts import train_rows, transcripts_due

__all__ = ["train", "driver_threads"]


def driver_threads(cfg: Config, capacity: int, default: int, world: int = 1,
                   execution: Execution | None = None) -> ThreadPolicy:
    """The torch threads of the training process, as a :class:`~cogym.core.threads.ThreadPolicy` whose
    ``adjust`` each iteration calls. ``run.threads`` pins them when set. Else 1 at token level: play is many
    small forwards (one id a row, a forward a step), which threads split at a loss. Else at most ``default``
    (torch's, which respects ``OMP_NUM_THREADS``) and the ``capacity`` cores this process may use
    (affinity, cgroup quota) less what cogym runs beside it: with ``--nproc`` (``world`` ranks) a rank's
    share; the cores the run's execution (``execution``, else ``run.backend``'s) keeps busy with its own
    workers while this process updates (:meth:`~cogym.runners.train.execution.Execution.cores_beside`;
    docs/performance.md). Under that
    ceiling the count follows the load other processes put on the cores, at least 1."""
    if cfg.run.threads:
        return ThreadPolicy(pinned=cfg.run.threads, capacity=capacity)
    if cfg.game.granularity == "token":
        return ThreadPolicy(pinned=1, capacity=capacity)
    reserved = capacity - capacity / max(1, world) + (execution or execution_for(cfg)).cores_beside()
    return ThreadPolicy(ceiling=default, reserved=reserved, capacity=capacity)


def train(cfg: Config, run_path: Path | None = None, resume: bool = False, progress: bool = True,
          overwrite: bool = False) -> dict:
    """Run a whole training job; return the summary (also written to summary.json).

    The run directory is guarded (:mod:`cogym.runners.rundir`): a directory that holds files cogym did not
    write, or an earlier run, is refused unless ``overwrite`` (or ``resume``); with ``overwrite`` the
    earlier run's own files go first. Resuming a run that already finished its
    ``run.iterations`` trains nothing and returns its summary.json as it is (with ``already_finished``)."""
    t_start = time.time()
    run_path = Path(run_path) if run_path else Path(cfg.run.out_dir) / f"{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    execution = execution_for(cfg)
    stages = plan(cfg)
    if dist.world_size() > 1:  # a data-parallel worker: every rank writes to rank 0's run directory
        for stage in stages:
            check_data_parallel(stage.cfg, dist.world_size())
        run_path = Path(dist.broadcast_object(str(run_path)))
    if dist.is_main():
        rundir.claim(run_path, "train", "--resume" if resume else "--run-dir", overwrite=overwrite, resume=resume)
        if not resume:
            _start_fresh(run_path)
    start_it, ckpt = 1, None
    if resume:
        ckpt = last_checkpoint(run_path)
        if ckpt is None:
            raise FileNotFoundError(f"--resume: no complete checkpoint under {run_path / 'checkpoints'}")
        check_resume_world(ckpt, dist.world_size(), execution.learner_world)
        unowned_after(run_path, ckpt)
        start_it = read_trainer_state(ckpt)["iteration"] + 1
        kept = _finished_summary(run_path) if start_it > cfg.run.iterations else None
        if kept is not None:
            if dist.is_main():
                print(f"cogym train: {run_path} finished its {cfg.run.iterations} iterations ({ckpt.name}); nothing "
                      f"to resume, its summary.json is kept (add run.iterations=N to train on)", file=sys.stderr)
            return {**kept, "already_finished": True}
        check_resume(ckpt, start_it - 1, stages)
    threads_before = torch.get_num_threads()
    threads = driver_threads(cfg, cpu_capacity(), threads_before, dist.world_size(), execution)
    threads.apply()
    try:
        while True:
            try:
                return _train(cfg, stages, execution, run_path, start_it, ckpt, t_start, progress, threads)
            except LearnerDied as exc:  # a learner living elsewhere died with its optimizer state
                ckpt = last_checkpoint(run_path)
                execution.lost_learner(exc, run_path, ckpt)  # raises when the run stops
                if ckpt is None:  # before the first checkpoint: the run starts again from its config
                    start_it = 1
                    forget_attempt(run_path)
                else:
                    start_it = read_trainer_state(ckpt)["iteration"] + 1
    finally:
        torch.set_num_threads(threads_before)


def _start_fresh(run_path: Path) -> None:
    """A new run in a directory an earlier cogym run used (claimed with ``--overwrite``): what that run
    wrote goes first (its checkpoints, rows, events and summary), so nothing of it mixes with the new
    run's. In a directory cogym did not make, only the checkpoints cogym wrote go."""
    remove_checkpoints(run_path / "checkpoints")
    if rundir.marker_kind(run_path) == "train":
        forget_attempt(run_path)
        (run_path / "summary.json").unlink(missing_ok=True)


def _finished_summary(run_path: Path) -> dict | None:
    """A finished run's summary.json (None when it has none that reads as a JSON object)."""
    path = run_path / "summary.json"
    if not path.is_file():
        return None
    try:
        kept = rundir.parse_json(rundir.read_text(path, run_path))
    except ValueError:  # (a RunDirError is one too)
        return None
    return kept if isinstance(kept, dict) else None


def _restore(cfg: Config, ckpt: Path | None, learners: dict | None = None, fresh: frozenset = frozenset()) -> Run:
    """Build the run; from a checkpoint, with its policies, critics and learner state (but for the learners
    of ``fresh``, which start anew: a stage's first iteration). ``learners``:
    the execution's learners (made elsewhere, with the checkpoint's policies). A learner state
    file that ``torch.load(weights_only=True)`` refuses (a pickle of other objects than tensors) is a
    one-line :class:`~cogym.runners.rundir.RunDirError`; nothing of it is run."""
    if ckpt is None:
        return build(cfg, learners=learners)
    run = build(cfg, {pid: ckpt / "policies" / pid for pid in cfg.policies},
                {pid: ckpt / "learners" / pid / "critic" for pid in cfg.policies if pid not in fresh}, learners=learners)
    for pid, learner in run.learners.items():
        try:
            if pid not in fresh:
                learner.load(ckpt / "learners" / pid)
        except pickle.UnpicklingError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise rundir.RunDirError(f"--resume: {ckpt / 'learners' / pid} holds a file that torch.load(weights_only="
                                     f"True) refused, so nothing of it was loaded ({first[:200]}); resume only "
                                     "checkpoints you trust to be cogym's") from exc
        run.policies[pid].backend.load_weights(None, version=learner.steps)  # the checkpoint's weights
    return run


def _update(trained: Trained, execution: Execution, batches: dict[str, list], main: bool) -> dict[str, float]:
    """Every learner's step on its policy's turns (:meth:`~cogym.runners.train.execution.Execution.updates`:
    all may start before any is waited for), with the retokenization drift check."""
    t0 = time.perf_counter()
    rec: dict[str, float] = {}
    updates = execution.updates(trained, batches)
    for pid in trained.learners:
        turns = batches[pid]
        if turns and main:
            rec[f"{pid}/retokenize_mismatch"] = retokenize_mismatch(trained.policies[pid], turns)
            breaks, checked = continuity_breaks(turns)
            if checked:  # conversation moves whose prompt is not the last prompt + answer + new messages
                rec[f"{pid}/context_drift"] = breaks / checked
            mixed, groups = mixed_prompt_groups(turns)
            if groups < len(turns):  # some group has several members: did they answer the same prompt?
                rec[f"{pid}/mixed_prompt_groups"] = float(mixed)
        for k, v in updates.finish(pid).items():
            rec[f"{pid}/{k}"] = v
    rec["update_s"] = time.perf_counter() - t0
    return rec


def _train(cfg: Config, stages: list[Stage], execution: Execution, run_path: Path, start_it: int, ckpt: Path | None,
           t_start: float, progress: bool, threads: ThreadPolicy) -> dict:
    """The stages from ``start_it`` on, each from the checkpoint the one before wrote at its last iteration."""
    history: list[dict] = []  # every iteration's row this process trained, across stages
    first_it, summary = start_it, {}
    for stage in stages:
        if stage.last < start_it and stage is not stages[-1]:
            continue  # trained before the checkpoint resumed
        # at the stage's first iteration its changed learners start fresh; inside it, from the checkpoint
        built = stage.config(run_path / "checkpoints"), stage.fresh if start_it == stage.first else frozenset()
        execution.stage(*built, stage.index)  # e.g. Ray's learner actors and workers are made anew for each stage
        execution.open(ckpt)
        try:
            summary = _loop(cfg, stage, built, execution, run_path, (first_it, start_it), ckpt, t_start, progress,
                            threads, history)
        finally:
            execution.close()
        start_it, ckpt = stage.last + 1, step_dir(run_path / "checkpoints", stage.last)
    return summary


def _loop(cfg: Config, stage: Stage, built: tuple[Config, frozenset], execution: Execution, run_path: Path,
          starts: tuple[int, int], ckpt: Path | None, t_start: float, progress: bool, threads: ThreadPolicy,
          history: list[dict]) -> dict:
    """Train ``stage`` from iteration ``starts[1]`` (``starts[0]``: this process's first) to its last, then, at
    the run's last iteration, evaluate and summarise; a stage before the last ends with its checkpoint.
    ``built``: the config the stage's run is built from and the learners that start fresh."""
    first_it, start_it = starts
    stage.seed_build()
    run = _restore(built[0], ckpt, execution.learners or None, built[1])
    seen = Trained(run.policies, run.learners)  # what the execution sees of the run
    main = dist.is_main()  # data parallel: rank 0 evaluates, logs, plots and shows progress
    sinks = open_sinks(run_path, cfg.run, cfg.to_dict(), run.roles, start_it, main)
    hooks: list[TrainHook] = [LeagueHook(run.league)] if run.league is not None else []
    seated = {pid for pid, _ in run.seats.values()}  # a reward model (reward_from) trains on another policy's turns
    hooks.append(IdlePolicies(dataclasses.replace(cfg.run, iterations=stage.last), run.seats,
                              [pid for pid in run.learners if pid in seated]))
    if stage.name:
        hooks.append(StageHook(stage))
    for hook in hooks:
        hook.start(start_it - 1, ckpt)
    engines = sorted({lr.engine.name for lr in run.learners.values()}) or ["none (all frozen)"]
    summary: dict = {"run_dir": str(run_path), "engines": engines}
    between = False  # the stage ended before the run's last iteration: no summary yet

    def fresh() -> Run:  # the driver's policies hold the newest weights (learners may train elsewhere)
        execution.refresh(seen)
        return run

    try:
        execution.attach(seen)
        sampler = Sampler(run, execution.rollouts(), hooks, last=stage.last)  # one step ahead: none past the stage
        summary.update(_evaluate_before(run, sinks, start_it, main))
        bar = tqdm(range(start_it, stage.last + 1), desc=" ".join(filter(None, (cfg.run.name, stage.name))), unit="it",
                   disable=not (progress and main), initial=start_it - 1, total=cfg.run.iterations, dynamic_ncols=True)
        trained = start_it - 1  # the last iteration whose update is done
        if main and start_it > 1:
            _trim_game_errors(run_path, start_it)  # the iterations a resumed run replays log theirs again
        said = len(threads.changes)  # the thread changes told on stderr
        try:
            for it in bar:
                t_it = time.perf_counter()
                n_threads = threads.adjust()  # fewer while other processes hold cores (docs/performance.md)
                if len(threads.changes) > said:
                    said = len(threads.changes)
                    _say_threads(threads.changes[-1], said, main)
                res, batches, metrics = sampler.take(it)  # one step ahead, the next rollout is under way
                if res.errors and main:
                    _log_game_errors(run_path, it, res.errors, bar)
                if main and transcripts_due(it, cfg.run.transcripts_every, cfg.run.iterations):
                    sinks.transcripts(train_rows(res, it, res.seeds, cfg.run.transcripts_games))  # the seeds the games were reset with
                metrics.update(execution.batch_metrics(seen, batches))
                rec = {"iteration": it, **stage.row, **metrics, **_update(seen, execution, batches, main), "threads": n_threads}
                trained = it
                rec.update(execution.after_update(seen))  # the new weights, to where the next rollout plays
                rec["iteration_s"] = time.perf_counter() - t_it  # rollout (or the wait for it), update, weight sync
                if any(hook.reads_policies(it) for hook in hooks):
                    fresh()  # e.g. a league snapshots the driver's policy: the learners' newest weights
                for hook in hooks:
                    hook.after_update(it)
                if main and cfg.run.eval_every and it % cfg.run.eval_every == 0 and it != cfg.run.iterations:
                    try:
                        rec.update(evaluate(run.evaluators, fresh()))
                    except GameStepError:
                        sinks.log(rec)  # the update is done and will be checkpointed: its row must not be lost
                        raise
                for hook in hooks:
                    rec.update(hook.before_log(it, rec))
                sinks.log(rec)
                history.append(rec)
                bar.set_postfix({k.replace("/reward", ""): f"{rec[k]:.2f}" for k in rec if k.endswith("/reward")}
                                | {"tok/s": f"{rec['tokens_per_s']:.0f}"})
                if cfg.run.checkpoint_every and it % cfg.run.checkpoint_every == 0:
                    save_checkpoint(fresh(), run_path / "checkpoints", it, hooks)
        except GameStepError as exc:
            raise _stopped(exc, run_path, trained, start_it, fresh, hooks) from exc
        bar.close()
        missed = not step_dir(run_path / "checkpoints", stage.last).is_dir()
        if stage.last < cfg.run.iterations:  # the next stage starts from this checkpoint, whatever checkpoint_every says
            if dist.broadcast_object(missed):
                save_checkpoint(fresh(), run_path / "checkpoints", stage.last, hooks)
            between = True
            return summary
        if cfg.run.checkpoint_every and dist.broadcast_object(missed):
            save_checkpoint(fresh(), run_path / "checkpoints", cfg.run.iterations, hooks)  # the final state
        summary.update(_evaluate_after(fresh(), sinks, main))
        summary.update(reward_summary(history, run.roles))
        summary["iterations"] = cfg.run.iterations
        summary["first_iteration"] = first_it  # of this process's history: a resumed run's reward windows start here
        summary["tokens_per_s"] = mean_last(history, "tokens_per_s", k=len(history) or 1)
        for hook in hooks:
            summary.update(hook.summary())
        if threads.changes:
            summary["threads_changed"] = len(threads.changes)
        summary.update(execution.summary())
    finally:
        summary["wall_s"] = round(time.time() - t_start, 1)
        sinks.close()
        for policy in run.policies.values():  # a vLLM engine's processes end with the run, not when GC gets to them
            close = getattr(policy.backend, "close", None)
            if callable(close):
                close()
        if main and not between:
            rundir.write_json(run_path / "summary.json", summary)
    return summary


def _say_threads(change: tuple[int, int, float], count: int, main: bool) -> None:
    """One stderr line for each of a run's first 3 changes of its torch threads; later ones go to metrics only."""
    if not main or count > 3:
        return
    was, now, load = change
    why = "other processes use" if now < was else "other processes now use only"
    more = "; later changes go to metrics.jsonl only" if count == 3 else ""
    tqdm.write(f"cogym train: torch threads {was} -> {now}: {why} {load:.1f} cores\n"
               f"  (run.threads=N pins the count{more})", file=sys.stderr)


def _trim_game_errors(run_path: Path, start_it: int) -> None:
    path = run_path / "game_errors.jsonl"
    if path.is_file() or path.is_symlink():
        rundir.write_jsonl(path, [r for r in rundir.read_jsonl(path) if isinstance(r.get("iteration", 0), int)
                                  and r.get("iteration", 0) < start_it])


def _log_game_errors(run_path: Path, iteration: int, errors: list[dict], bar) -> None:
    """Games skipped for raising (game.on_error: skip): one line on the console, each in game_errors.jsonl."""
    with rundir.open_append(run_path / "game_errors.jsonl") as f:
        for e in errors:
            f.write(json.dumps({"iteration": iteration, **e}, default=str) + "\n")
    first = errors[0]
    bar.write(f"iteration {iteration}: skipped {len(errors)} game(s) that raised, e.g. {first['game']} seed {first['seed']} "
              f"seat {first['seat']}: {first['error'][:120]} (all in {run_path / 'game_errors.jsonl'})", file=sys.stderr)


def _stopped(exc: GameStepError, run_path: Path, trained: int, start_it: int, fresh, hooks) -> GameStepError:
    """The report of a game that stopped the run, with how to go on: the state after the last finished
    update is checkpointed (one process; with data parallel the other ranks are still in the rollout)."""
    if trained >= start_it and dist.world_size() == 1:
        if not (run_path / "checkpoints" / f"step_{trained:06d}").is_dir():
            save_checkpoint(fresh(), run_path / "checkpoints", trained, hooks)
        note = (f"The run stopped after iteration {trained}, whose state is checkpointed: `cogym train --resume "
                f"{run_path}` goes on from it (add game.on_error=skip to skip games that raise).")
    elif trained >= 1:
        note = (f"The run stopped after iteration {trained}: `cogym train --resume {run_path}` goes on from its last "
                "checkpoint (add game.on_error=skip to skip games that raise).")
    else:
        note = "The run stopped in its first iteration, before any update: fix the game (or set game.on_error=skip) and start again."
    if "\n" not in str(exc):  # a one-line report (a play limit) stays one line
        return exc if trained < 1 else type(exc)(f"{exc}. {note}", exc.record)
    return type(exc)(f"{exc}\n{note}", exc.record)  # a GameContractError stays one


def _evaluate_before(run: Run, sinks: Sinks, start_it: int, main: bool) -> dict:
    """The evaluations before training (logged at iteration 0; read back on resume), as summary entries."""
    if not main or not run.evaluators:
        return {}
    if start_it == 1:
        before = evaluate(run.evaluators, run)
        if before:
            sinks.log({"iteration": 0, **before})
    else:
        before = {k: v for k, v in sinks.logged(0).items() if k != "iteration"}
    return {f"{k}_before": v for k, v in before.items()}


def _evaluate_after(run: Run, sinks: Sinks, main: bool) -> dict:
    if not main or not run.evaluators:
        return {}
    after = evaluate(run.evaluators, run)
    if after:
        sinks.log({"iteration": run.cfg.run.iterations, **after})
    return {f"{k}_after": v for k, v in after.items()}

