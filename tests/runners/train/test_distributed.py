"""Data parallel: 2 processes (torch.distributed, gloo on CPU) train exactly like 1 on the same global batch.

* ``Learner.update`` on a fixed global batch of Turns (seeded random ids on a tiny model, uneven groups and
  lengths so the global token / sequence normalisation matters) in 1 process and in 2 processes: the
  ``loss`` metric (and the other step metrics) and the updated parameters agree within float tolerance,
  on the torch engine and on DeepSpeed ZeRO-1 / ZeRO-2, for GRPO, RLOO and PPO with its critic.
* ``cogym train --nproc 2`` end to end: one metrics row per iteration, per-rank ZeRO files in the
  checkpoint, and ``--resume`` (also ``--nproc 2``) replays the last iteration exactly.
* The launcher's error paths: a bad ``--nproc``, ``num_games`` not divisible, SPIN, a failing worker.

The worker processes run this file as a script (``python test_distributed.py WORKER ...``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

COGYM = Path(sys.executable).with_name("cogym")
KUHN = str(Path(__file__).resolve().parents[3] / "cogym" / "configs" / "kuhn_poker.yaml")
TIMING = ("rollout_s", "update_s", "iteration_s", "tokens_per_s")  # wall-clock measurements differ between any two runs
RTOL = 1e-5  # metrics and parameters, 2 processes vs 1: float32 sums in another order
ATOL = 1e-6

# name -> LearnerConfig overrides. 13 rows: rank 0 trains 7, rank 1 trains 6 (with micro_batch_size 1,
# rank 1 takes its 7th micro-step with a zero loss).
CASES = {
    "torch_grpo_2epochs": dict(engine="torch", algorithm="grpo", micro_batch_size=3, epochs=2),
    "zero1_grpo_kl_entropy": dict(engine="deepspeed", zero_stage=1, algorithm="grpo", micro_batch_size=1,
                                  kl_in_loss="k3", kl_loss_coef=0.1, entropy_coef=0.01, loss_agg="seq-mean-token-mean"),
    "zero2_rloo_dr_grpo_agg": dict(engine="deepspeed", zero_stage=2, algorithm="rloo", micro_batch_size=2,
                                   loss_agg="dr_grpo", norm_const=8.0),
    "torch_ppo_critic": dict(engine="torch", algorithm="ppo", micro_batch_size=4, critic_lr=1e-3),
    "zero1_ppo_critic": dict(engine="deepspeed", zero_stage=1, algorithm="ppo", micro_batch_size=5, critic_lr=1e-3),
}
GROUP_SIZES = (4, 3, 4, 2)


def _env(**extra: str) -> dict:
    # Not this pytest process's rendezvous (in-process DeepSpeed tests leave one in os.environ).
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    return {**env, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", **extra}


# ------------------------------------------------------------------ the worker (run as a script)

def _make_turns(model_dir: Path, seed: int = 0) -> list[dict]:
    """A fixed global batch: random prompt/response ids, behaviour log-probs = the model's own plus noise
    (ratios near 1, some clipped), 0/1 rewards mixed within each group."""
    from cogym.agents.policy import Policy
    from cogym.core.types import Turn
    from cogym.learners.learner import TokenBatch, response_logp

    policy = Policy.from_pretrained(model_dir)
    g = torch.Generator().manual_seed(seed)
    vocab = int(policy.model.get_output_embeddings().weight.shape[0])
    turns = []
    for group, size in enumerate(GROUP_SIZES):
        for k in range(size):
            p_len, r_len = int(torch.randint(2, 12, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g))
            ids = torch.randint(3, vocab, (p_len + r_len,), generator=g).tolist()
            turns.append(Turn(game_index=group, episode_id=f"ep-{group}", seat=f"solver_{k}", role="solver",
                              policy_id="solver", prompt_ids=ids[:p_len], response_ids=ids[p_len:], logprobs=[0.0] * r_len,
                              text="", finished=True, reward=float((k + group) % 2), group_key=(f"ep-{group}", "solver")))
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = response_logp(policy.model, b)
    noise = 0.1 * torch.randn(logp.shape, generator=g)
    out = []
    for i, t in enumerate(turns):
        r = len(t.response_ids)
        out.append({**t.__dict__, "logprobs": (logp[i, :r] + noise[i, :r]).tolist(), "group_key": list(t.group_key)})
    return out


def _params(learner) -> dict[str, torch.Tensor]:
    """The policy's weights and, with PPO, the critic's."""
    out = {k: v.detach().clone() for k, v in learner.policy.model.state_dict().items()}
    if "ppo" in learner.algorithms:
        critic = learner.algorithms["ppo"].critic
        out.update({f"critic.{k}": v.detach().clone() for k, v in critic.model.state_dict().items()})
    return out


def _worker(turns_file: str, model_dir: str, out_dir: str) -> None:
    from cogym.agents.policy import Policy
    from cogym.core.types import Turn
    from cogym.learners import torch_dist as dist
    from cogym.learners.config import LearnerConfig
    from cogym.learners.learner import Learner

    torch.set_num_threads(1)
    dist.init_from_env()
    rank, world = dist.rank(), dist.world_size()
    rows = json.loads(Path(turns_file).read_text())
    turns = [Turn(**{**r, "group_key": tuple(r["group_key"])}) for r in rows]
    for name, overrides in CASES.items():
        policy = Policy.from_pretrained(model_dir)
        learner = Learner(policy, LearnerConfig.from_flat(lr=1e-3, **overrides))
        if world == 1:
            torch.save(_params(learner), Path(out_dir) / f"{name}.before.pt")
        metrics = learner.update(turns)
        torch.save(_params(learner), Path(out_dir) / f"{name}.w{world}.rank{rank}.pt")
        (Path(out_dir) / f"{name}.w{world}.rank{rank}.json").write_text(json.dumps(metrics))
    dist.barrier()


# ------------------------------------------------------------------ equivalence of one update

def _compare(name: str, out: Path) -> dict:
    m1 = json.loads((out / f"{name}.w1.rank0.json").read_text())
    m2 = [json.loads((out / f"{name}.w2.rank{r}.json").read_text()) for r in range(2)]
    p1 = torch.load(out / f"{name}.w1.rank0.pt")
    p2 = [torch.load(out / f"{name}.w2.rank{r}.pt") for r in range(2)]
    assert m2[0] == m2[1], f"{name}: the two ranks report different metrics"
    for key in p1:
        assert torch.equal(p2[0][key], p2[1][key]), f"{name}: ranks disagree on {key}"
    assert set(m1) == set(m2[0]), f"{name}: metric keys {sorted(set(m1) ^ set(m2[0]))}"
    for key, v1 in m1.items():
        assert m2[0][key] == pytest.approx(v1, rel=RTOL, abs=ATOL), f"{name}: {key} {m2[0][key]!r} vs {v1!r}"
    before = torch.load(out / f"{name}.before.pt")
    worst, update = 0.0, 0.0
    for key, w1 in p1.items():
        torch.testing.assert_close(p2[0][key], w1, rtol=RTOL, atol=ATOL, msg=lambda m, k=key: f"{name}: {k}: {m}")
        worst = max(worst, float((p2[0][key] - w1).abs().max()))
        update = max(update, float((w1 - before[key]).abs().max()))
    assert worst < 1e-2 * update, f"{name}: parameters differ by {worst}, the update itself is {update}"
    return {"loss_1proc": m1["loss"], "loss_2proc": m2[0]["loss"],
            "loss_rel_diff": abs(m2[0]["loss"] - m1["loss"]) / max(abs(m1["loss"]), 1e-30),
            "grad_norm_rel_diff": abs(m2[0]["grad_norm"] - m1["grad_norm"]) / m1["grad_norm"],
            "max_param_abs_diff": worst, "max_param_update": update}


@pytest.mark.slow
def test_two_processes_update_like_one_on_the_same_global_batch(tiny_model_dir: Path, tmp_path: Path) -> None:
    from cogym.runners.train.launch import run_workers

    turns_file = tmp_path / "turns.json"
    turns_file.write_text(json.dumps(_make_turns(tiny_model_dir)))
    cmd = [sys.executable, __file__, "WORKER", str(turns_file), str(tiny_model_dir), str(tmp_path)]
    one = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert run_workers(cmd, 2, env=_env(), name="equivalence workers") == 0
    log = one.communicate(timeout=300)[0]
    assert one.returncode == 0, log[-3000:]
    report = {name: _compare(name, tmp_path) for name in CASES}
    print(json.dumps(report, indent=1))
    # The batch really trains: the loss is not trivially 0 and parameters moved.
    assert all(abs(r["loss_1proc"]) > 1e-4 for r in report.values())


# ------------------------------------------------------------------ cogym train --nproc 2

def _overrides(model_dir: Path) -> list[str]:
    return [f"policies.player.model={model_dir}", "learners.player.engine=deepspeed", "learners.player.zero_stage=1",
            "learners.player.lr=1e-2", "learners.player.micro_batch_size=3", "game.num_games=6", "run.iterations=3",
            "run.checkpoint_every=2", "run.tensorboard=false", "run.plot=false", "run.seed=1"]


def _cogym(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(COGYM), *args], env=_env(), capture_output=True, text=True, timeout=timeout)


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows if "rollout_s" in r]


@pytest.mark.slow
def test_cogym_train_nproc_2_checkpoints_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    assert COGYM.is_file(), f"console script not installed at {COGYM}"
    run = tmp_path / "run"
    proc = _cogym(["train", KUHN, "--nproc", "2", "--run-dir", str(run), "--no-progress",
                   *_overrides(tiny_model_dir)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("cogym train: summary") == 1  # rank 0 prints; rank 1 does not
    rows = _rows(run)
    assert [r["iteration"] for r in rows] == [1, 2, 3]  # one row per iteration, not one per rank
    assert all(r["turns"] >= 6 for r in rows)  # the rows hold all 6 games, not one rank's 3
    assert all("player/loss" in r for r in rows)
    step2 = run / "checkpoints" / "step_000002"
    for name in ("zero_optimizer.rank0.pt", "zero_optimizer.rank1.pt", "state.json"):
        assert (step2 / "learners" / "player" / name).is_file(), name
    assert json.loads((step2 / "trainer_state.json").read_text())["world_size"] == 2
    assert (run / "checkpoints" / "step_000003").is_dir()
    assert not list((run / "checkpoints").glob(".tmp*"))  # no scratch directories left behind
    assert (run / "summary.json").is_file()

    # Resume from step 2 (step 3 removed): iteration 3 is replayed exactly, and the run ends with 3 rows.
    shutil.rmtree(run / "checkpoints" / "step_000003")
    wrong = _cogym(["train", "--resume", str(run), "--no-progress"])
    assert wrong.returncode == 2 and "resume it with --nproc 2" in wrong.stderr, wrong.stderr[-2000:]
    again = _cogym(["train", "--resume", str(run), "--nproc", "2", "--no-progress"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert _rows(run) == rows  # every metric of every iteration, exactly
    assert (run / "checkpoints" / "step_000003" / "learners" / "player" / "zero_optimizer.rank1.pt").is_file()


# ------------------------------------------------------------------ error paths

def test_nproc_must_be_a_positive_integer(capsys: pytest.CaptureFixture) -> None:
    from cogym.runners.cli import main

    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit) as exc:
            main(["train", KUHN, "--nproc", bad])
        assert exc.value.code == 2
        assert "--nproc" in capsys.readouterr().err


@pytest.mark.parametrize("overrides, message", [
    (["game.num_games=5"], "game.num_games = 5 is not divisible by 2"),
    (["learners.player.engine=deepspeed", "learners.player.zero_stage=3"], "zero_stage 3"),
])
def test_nproc_refuses_configs_it_cannot_split(overrides: list[str], message: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    from cogym.runners.cli import main

    t0 = time.monotonic()
    code = main(["train", KUHN, "--nproc", "2", "--run-dir", str(tmp_path / "run"), *overrides])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "run").exists()  # refused before any worker started or wrote anything
    assert time.monotonic() - t0 < 30


def test_nproc_refuses_spin() -> None:
    from cogym.runners.config.load import load_config
    from cogym.core.errors import ConfigError
    from cogym.runners.train.launch import check_data_parallel

    cfg = load_config(KUHN, ["learners.player.algorithm=spin", "game.num_games=4"])
    check_data_parallel(cfg, 1)  # one process: fine
    with pytest.raises(ConfigError, match="spin, which trains in one process only"):
        check_data_parallel(cfg, 2)


def test_a_failing_worker_stops_the_others_and_is_named(capsys: pytest.CaptureFixture) -> None:
    from cogym.runners.train.launch import run_workers

    script = ("import os, sys, time\n"
              "r = int(os.environ['RANK'])\n"
              "assert os.environ['WORLD_SIZE'] == '3' and os.environ['MASTER_ADDR'] and os.environ['MASTER_PORT']\n"
              "if r == 1:\n    print('rank one gives up', flush=True)\n    sys.exit(3)\n"
              "time.sleep(120)\n")
    t0 = time.monotonic()
    code = run_workers([sys.executable, "-c", script], 3, env=_env(), name="test")
    assert code == 3
    assert time.monotonic() - t0 < 30  # the sleeping ranks were stopped, not waited for
    err = capsys.readouterr().err
    assert "worker rank 1 of 3 failed (exit code 3)" in err and "rank one gives up" in err, err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_workers_die_with_a_launcher_killed_by_sigkill(tmp_path: Path) -> None:
    import signal

    marker = tmp_path / "workers"
    marker.mkdir()
    script = ("import os, pathlib, time\n"
              f"pathlib.Path({str(marker)!r}, os.environ['RANK']).write_text(str(os.getpid()))\n"
              "time.sleep(120)\n")
    launcher = subprocess.Popen([sys.executable, "-c",
                                 "import sys; from cogym.runners.train.launch import run_workers; "
                                 f"sys.exit(run_workers([sys.executable, '-c', {script!r}], 2, name='test'))"],
                                env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(list(marker.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(p.read_text()) for p in marker.iterdir()]
    assert len(pids) == 2, "the workers never started"
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()

    def alive(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        return state != "Z"  # a zombie has exited (its reaper is init)

    deadline = time.monotonic() + 20
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), "workers outlived their launcher"


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "WORKER":
    _worker(*sys.argv[2:])
