"""Randomized fault trials for `cogym train --ray`: kill rollout workers (and, with --learners, learner
actors) from outside at random moments, and check that every run finishes with the metrics of an
uninterrupted run.

Each trial is a real `cogym train` process (the default config shrunk: --iterations iterations of
--games games, two rollout workers) on a local Ray cluster of its own. A killer thread watches the
run's Ray actor processes (their titles say what each one is doing: ``ray::RolloutWorker.rollout``,
``ray::RolloutWorker.load_weights`` or ``.receive_weights``, ``ray::RolloutWorker`` when idle) and SIGKILLs 1 to 3 of them, each
at a moment of a randomly drawn kind:

  rollout     a worker while it plays its share of a rollout
  sync        a worker while it loads new weights (or, ray.weight_sync=collective, takes a broadcast)
  idle        a worker between two calls (Ray restarts it before the driver calls it again)
  restarting  a worker, then at once another one while the first restarts
  any         whatever worker at a random time
  learner     a learner actor while it updates (only with --learners colocated|separate)

Trials go on until --trials runs had at least one kill land. A trial passes when the run exits 0 and its metrics rows (without wall-clock figures and Ray's
bookkeeping) equal the uninterrupted run's: exactly, or to float rounding where noted (the same
tolerance as the tests: 1e-4 relative), with every token and reward count exact. A kill whose moment
never came (e.g. the run ended first) is reported as missed, not as a pass.

    python scripts/ray_faults.py --trials 20           # about 10 minutes on 2 cores
    python scripts/ray_faults.py --trials 3 --seed 1 --learners colocated
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

try:
    import psutil
except ImportError:  # psutil comes with ray[default]
    sys.exit("scripts/ray_faults.py needs psutil: pip install 'cogym[ray]'")

KINDS = ("rollout", "sync", "idle", "restarting", "any")
REL, ABS = 1e-4, 1e-5  # float rounding, as tests/rounding.py
CONFIG = Path(str(resources.files("cogym.configs").joinpath("proposer_solver.yaml")))


@dataclass
class Trial:
    number: int
    kinds: list[str]
    kills: list[str] = field(default_factory=list)  # what was killed, and when
    missed: list[str] = field(default_factory=list)
    rc: int | None = None
    verdict: str = ""
    restarts: dict = field(default_factory=dict)
    seconds: float = 0.0
    err_tail: str = ""


def cogym_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("cogym")
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "cogym.runners.cli"]


def train_args(run_dir: Path, a) -> list[str]:
    return [*cogym_cmd(), "train", str(CONFIG), f"run.iterations={a.iterations}", f"game.num_games={a.games}", "run.eval_every=0", "eval.declared=false",
            "run.tensorboard=false", "run.plot=false", "learners.solver.engine=torch", "learners.proposer.engine=torch",
            f"run.checkpoint_every={1 if a.learners != 'driver' else 0}", "ray.num_rollout_workers=2",
            f"ray.learners={a.learners}", "ray.max_restarts=8", "run.threads=1", "ray.num_cpus=0.5",
            "ray.learner_num_cpus=0.5", f"run.seed={a.run_seed}", *a.set, "--run-dir", str(run_dir), "--no-progress",
            "--ray"]


def rows(run_dir: Path) -> list[dict]:
    out = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.endswith("_s") and not k.startswith("ray/")} for r in out]


def close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=REL, abs_tol=ABS)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    return a == b


def actors(root: int, title: str) -> list[psutil.Process]:
    """The descendants of ``root`` whose process title starts with ``title`` (Ray sets ``ray::Class.method``)."""
    try:
        kids = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in kids if state(p).startswith(title)]


def state(p: psutil.Process) -> str:
    """The process title (Ray's ``ray::Class.method`` while a call runs), read straight from /proc."""
    try:
        with open(f"/proc/{p.pid}/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


class Killer(threading.Thread):
    """Kills the trial's actors at moments of the drawn kinds, one after another, then stops."""

    def __init__(self, proc: subprocess.Popen, trial: Trial, rng: random.Random, budget_s: float) -> None:
        super().__init__(daemon=True)
        self.proc, self.trial, self.rng, self.budget_s = proc, trial, rng, budget_s
        self.t0 = time.monotonic()
        self.dead: set[int] = set()  # the pids killed (a second kill of a dying process is no kill)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self, p: psutil.Process, what: str) -> bool:
        try:
            title = state(p)
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            return False
        self.dead.add(p.pid)
        self.trial.kills.append(f"{what}: {title or '?'} pid {p.pid} at {time.monotonic() - self.t0:.1f} s")
        return True

    def wait_for(self, title: str | tuple[str, ...], exact: bool = False, deadline: float = 60.0, least: int = 1,
                 among: str = "ray::RolloutWorker") -> psutil.Process | None:
        """An actor of class ``among`` whose title is (or starts with) ``title`` (or one of them), polled every
        millisecond or so; ``least``: only once that many of them are up (past their constructors)."""
        titles = (title,) if isinstance(title, str) else title
        end = time.monotonic() + deadline
        procs, listed = [], 0.0
        while self.alive() and time.monotonic() < end:
            if time.monotonic() - listed > 0.05:  # the process list is slow to walk; the titles are not
                procs, listed = actors(self.proc.pid, among), time.monotonic()
            ws = [(p, state(p)) for p in procs if p.pid not in self.dead]
            if sum(s.startswith(among) and not s.endswith("__init__") for _, s in ws) >= least:
                for p, s in ws:
                    if (s in titles) if exact else s.startswith(titles):
                        return p
            time.sleep(0.0005)
        return None

    def run(self) -> None:
        # moments spread over the uninterrupted run's length (its start included); the kinds that wait
        # for a state take the first one after their moment
        at = sorted(self.rng.uniform(0.0, 0.8 * self.budget_s) for _ in self.trial.kinds)
        for kind, moment in zip(self.trial.kinds, at):
            time.sleep(max(0.0, moment - (time.monotonic() - self.t0)))
            if not self.alive():
                self.trial.missed.append(f"{kind} (the run had ended)")
                continue
            done = False
            if kind == "rollout":
                p = self.wait_for("ray::RolloutWorker.rollout")
                done = p is not None and self.kill(p, kind)
            elif kind == "sync":
                p = self.wait_for(("ray::RolloutWorker.load_weights", "ray::RolloutWorker.receive_weights"))
                done = p is not None and self.kill(p, kind)
            elif kind == "idle":
                time.sleep(self.rng.uniform(0.0, 3.0))
                p = self.wait_for("ray::RolloutWorker", exact=True)
                done = p is not None and self.kill(p, kind)
            elif kind == "restarting":
                first = self.wait_for("ray::RolloutWorker", least=2)  # both up: one can die while the other restarts
                if first is not None:
                    others = [p for p in actors(self.proc.pid, "ray::RolloutWorker") if p.pid != first.pid and p.pid not in self.dead]
                    if self.kill(first, "restarting (first)") and others:
                        time.sleep(self.rng.uniform(0.0, 0.5))  # the first is being restarted
                        done = self.kill(self.rng.choice(others), "restarting (second)")
            elif kind == "any":  # the first worker seen (in whatever state) after the moment
                p = self.wait_for("ray::RolloutWorker")
                done = p is not None and self.kill(p, kind)
            elif kind == "learner":
                p = self.wait_for("ray::LearnerWorker.update", among="ray::LearnerWorker")
                done = p is not None and self.kill(p, kind)
            if not done:
                self.trial.missed.append(kind)


def run_once(run_dir: Path, a, trial: Trial | None, rng: random.Random | None) -> tuple[int, str, float]:
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = subprocess.Popen(train_args(run_dir, a), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    killer = None
    if trial is not None:
        killer = Killer(proc, trial, rng, a.budget_s)
        killer.start()
    try:
        _, err = proc.communicate(timeout=a.timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return -9, (err or "") + f"\n[ray_faults] the run took more than {a.timeout_s} s", time.monotonic() - t0
    if killer is not None:
        killer.join(timeout=5)
    return proc.returncode, err or "", time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                 epilog="Kinds of moment: " + ", ".join(KINDS) + " (and learner, with --learners).")
    ap.add_argument("--trials", type=int, default=20,
                    help="fault runs in which at least one kill landed (default 20; at most 3x as many runs in all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kills drawn (default 0)")
    ap.add_argument("--run-seed", type=int, default=0, help="run.seed of every run (default 0)")
    ap.add_argument("--iterations", type=int, default=4, help="iterations per run (default 4)")
    ap.add_argument("--games", type=int, default=8, help="games per iteration (default 8)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="kinds of moment to draw from (comma-separated)")
    ap.add_argument("--learners", choices=("driver", "colocated", "separate"), default="driver",
                    help="ray.learners; with actors, 'learner' kills are drawn too and runs checkpoint every iteration")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per run (default 600)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run, e.g. ray.weight_sync=collective (repeatable)")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs and a report.json here (default: a temp dir)")
    a = ap.parse_args(argv)
    kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in (*KINDS, "learner")]
    if bad:
        ap.error(f"unknown kinds {bad}; choose from {', '.join(KINDS)} (and learner, with --learners)")
    if "learner" in kinds and a.learners == "driver":
        ap.error("the learner kind kills learner actors: it needs --learners colocated or separate")
    if a.learners != "driver" and "learner" not in kinds:
        kinds.append("learner")
    root = a.out or Path(tempfile.mkdtemp(prefix="ray_faults-"))
    root.mkdir(parents=True, exist_ok=True)
    rc, err, secs = run_once(root / "reference", a, None, None)
    if rc != 0:
        print(err[-3000:], file=sys.stderr)
        print(f"the uninterrupted run failed (exit {rc})", file=sys.stderr)
        return 2
    ref = rows(root / "reference")
    a.budget_s = secs
    print(f"uninterrupted run: {len(ref)} iterations in {secs:.1f} s ({root / 'reference'})")
    rng = random.Random(a.seed)
    trials: list[Trial] = []
    n = 0
    while sum(1 for t in trials if t.kills) < a.trials and n < 3 * a.trials:
        n += 1
        t = Trial(n, [rng.choice(kinds) for _ in range(rng.randint(1, 3))])
        run_dir = root / f"trial_{n:03d}"
        t.rc, err, t.seconds = run_once(run_dir, a, t, random.Random(rng.random()))
        if t.rc != 0:
            t.verdict, t.err_tail = "CRASH", err[-2000:]
        else:
            got = rows(run_dir)
            t.verdict = "exact" if got == ref else ("rounding" if close(got, ref) else "DIFFERENT")
            summary = json.loads((run_dir / "summary.json").read_text())
            t.restarts = {k: summary[k] for k in ("ray_worker_restarts", "ray_learner_restarts") if k in summary}
        trials.append(t)
        print(f"trial {n:3d}  {t.verdict:9s} {t.seconds:6.1f} s  kills: " + ("; ".join(t.kills) or "none")
              + (f"  missed: {', '.join(t.missed)}" if t.missed else "")
              + (f"  {t.restarts}" if t.restarts else ""), flush=True)
        if t.verdict == "CRASH":
            print("  " + t.err_tail.strip().replace("\n", "\n  ")[-1500:], flush=True)
        elif a.out is None:
            shutil.rmtree(run_dir, ignore_errors=True)
    crashes = sum(t.verdict == "CRASH" for t in trials)
    different = sum(t.verdict == "DIFFERENT" for t in trials)
    kills = sum(len(t.kills) for t in trials)
    faulted = sum(1 for t in trials if t.kills)
    report = {"trials": len(trials), "faulted": faulted, "crashes": crashes, "different": different,
              "exact": sum(t.verdict == "exact" for t in trials), "rounding": sum(t.verdict == "rounding" for t in trials),
              "kills": kills, "missed": sum(len(t.missed) for t in trials),
              "runs": [t.__dict__ for t in trials]}
    (root / "report.json").write_text(json.dumps(report, indent=1))
    print(f"{len(trials)} trials ({faulted} with a kill that landed), {kills} kills ({report['missed']} missed): "
          f"{crashes} crashes, {different} with "
          f"other metrics, {report['exact']} exact, {report['rounding']} to float rounding ({root / 'report.json'})")
    return 1 if crashes or different else 0


if __name__ == "__main__":
    sys.exit(main())
