"""The Learner on a tiny random model: exact token batches, explicit groups, every parameter trained."""

from __future__ import annotations

import contextlib
import os
import random

import pytest
import torch

from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.core.types import Turn
from cogym.learners.config import LearnerConfig
from cogym.learners.learner import Learner, TokenBatch, response_logp

TRAINED_ALGORITHMS = ("grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline")


def _turns(policy: Policy, n_groups: int = 2, per_group: int = 4, role: str = "solver", temperature: float = 1.0,
           seed: int = 0, max_new_tokens: int = 6) -> list[Turn]:
    """Sampled turns, ``per_group`` answers to each of ``n_groups`` prompts, with varied rewards in every group."""
    prompts = [policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": f"{g}{g}+{g}"}])
               for g in range(n_groups) for _ in range(per_group)]
    torch.manual_seed(seed)
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature))
    turns = []
    for i, gen in enumerate(gens):
        g, k = divmod(i, per_group)
        turns.append(Turn(game_index=g, episode_id=f"ep-{g}", seat=f"{role}_{k}", role=role, policy_id=role,
                          prompt_ids=gen.prompt_ids, response_ids=gen.response_ids, logprobs=gen.logprobs,
                          text=gen.text, finished=gen.finished, reward=float((k + g) % 2), group_key=(f"ep-{g}", role)))
    return turns


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _trained_names(model: torch.nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _assert_every_parameter_changed(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = dict(model.named_parameters())
    names = _trained_names(model)
    assert names
    unchanged = [n for n in names if torch.equal(after[n].detach(), before[n])]
    assert not unchanged, f"parameters not updated: {unchanged}"


def _assert_unchanged(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


# ------------------------------------------------------------------ TokenBatch
def test_token_batch_rows_are_the_exact_ids(any_policy):
    policy = any_policy
    turns = _turns(policy, n_groups=2, per_group=3)
    turns[1].prompt_ids = turns[1].prompt_ids[:5]  # different prompt lengths too
    pad = policy.tokenizer.pad_token_id
    b = TokenBatch.from_turns(turns, pad)
    width = max(len(t.prompt_ids) + len(t.response_ids) for t in turns)
    lmax = max(len(t.response_ids) for t in turns)
    assert b.input_ids.shape == b.attention_mask.shape == (len(turns), width)
    assert b.resp_ids.shape == b.mask.shape == b.logp_old.shape == b.resp_index.shape == (len(turns), lmax)
    for i, t in enumerate(turns):
        n = len(t.prompt_ids) + len(t.response_ids)
        assert b.input_ids[i, :n].tolist() == t.prompt_ids + t.response_ids
        assert b.input_ids[i, n:].tolist() == [pad] * (width - n)  # right-padded
        assert b.attention_mask[i].tolist() == [1] * n + [0] * (width - n)
        r = len(t.response_ids)
        assert b.resp_ids[i, :r].tolist() == t.response_ids
        assert b.mask[i].tolist() == [1.0] * r + [0.0] * (lmax - r)
        # Position p + j - 1 predicts response token j.
        assert b.resp_index[i, :r].tolist() == list(range(len(t.prompt_ids) - 1, n - 1))
        assert b.input_ids[i, b.resp_index[i, :r] + 1].tolist() == t.response_ids
        torch.testing.assert_close(b.logp_old[i, :r], torch.tensor(t.logprobs))
        assert float(b.scores[i]) == t.reward
    assert b.roles == [t.role for t in turns] and b.group_keys == [t.group_key for t in turns]


def test_token_batch_rows_subset():
    turns = [Turn(0, "e", "s", "r", "p", [1, 2], [3], [-0.5], "x", True, reward=float(i), group_key=i)
             for i in range(4)]
    b = TokenBatch.from_turns(turns, 0).rows(torch.tensor([3, 1]))
    assert b.scores.tolist() == [3.0, 1.0] and b.group_keys == [3, 1] and b.input_ids.shape[0] == 2


def test_training_forward_reproduces_behaviour_logprobs(any_policy):
    policy = any_policy
    # Token-in/token-out: the learner's right-padded forward gives the rollout's left-padded log-probs.
    turns = _turns(policy, n_groups=3, per_group=3)
    b = TokenBatch.from_turns(turns, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp = response_logp(policy.model, b)
    torch.testing.assert_close(logp * b.mask, b.logp_old * b.mask, atol=1e-4, rtol=0)


# ------------------------------------------------------------------ groups
def _learner(policy, **kw) -> Learner:
    return Learner(policy, LearnerConfig.from_flat(engine="torch", **kw))


def _by_turn(learner: Learner, turns: list[Turn]) -> dict[str, float]:
    b = TokenBatch.from_turns(turns, learner.policy.tokenizer.pad_token_id)
    adv, _, _ = learner.advantages(b, None)
    out = {}
    for i, t in enumerate(turns):
        r = len(t.response_ids)
        row = adv[i, :r]
        assert torch.allclose(row, row[0].expand_as(row))  # outcome advantage on every response token
        assert float(adv[i, r:].abs().sum()) == 0.0
        out[f"{t.episode_id}/{t.seat}"] = float(row[0])
    return out


def test_grpo_groups_by_explicit_key_not_position(policy):
    learner = _learner(policy)
    turns = _turns(policy, n_groups=2, per_group=4)
    # Rewards: ep-0 -> [0,1,0,1], ep-1 -> [1,0,1,0]; make ep-1 three right of four instead.
    for t, r in zip(turns[4:], [1.0, 1.0, 1.0, 0.0]):
        t.reward = r
    reference = _by_turn(learner, turns)
    for seed in range(3):
        shuffled = turns[:]
        random.Random(seed).shuffle(shuffled)
        assert _by_turn(learner, shuffled) == pytest.approx(reference, abs=1e-6)
    # Hand values, z-score with the Bessel std (docs/algorithms.md section 4.2):
    # ep-0 (0,1,0,1): mean 0.5, std1 sqrt(1/3); ep-1 (1,1,1,0): mean 0.75, std1 0.5.
    expected = {"ep-0/solver_0": -0.5 / (1 / 3) ** 0.5, "ep-0/solver_1": 0.5 / (1 / 3) ** 0.5,
                "ep-1/solver_0": 0.5, "ep-1/solver_3": -1.5}
    for k, v in expected.items():
        assert reference[k] == pytest.approx(v, abs=1e-4)


def test_interleaved_groups_match_contiguous_groups(policy):
    learner = _learner(policy)
    turns = _turns(policy, n_groups=2, per_group=4)
    interleaved = [turns[i] for i in (0, 4, 1, 5, 2, 6, 3, 7)]
    assert _by_turn(learner, interleaved) == pytest.approx(_by_turn(learner, turns), abs=1e-6)


def test_advantages_are_computed_per_role(policy):
    learner = _learner(policy)
    a = _turns(policy, n_groups=1, per_group=2, role="solver")
    b = _turns(policy, n_groups=1, per_group=2, role="proposer", seed=1)
    for t, r in zip(a, [1.0, 0.0]):
        t.reward, t.group_key = r, "shared"
    for t, r in zip(b, [5.0, 5.0]):
        t.reward, t.group_key = r, "shared"
    adv = _by_turn(learner, a + b)
    # Per role: solver (1, 0) -> +-1/sqrt(2); proposer (5, 5) -> 0. Pooled, the solver would get negatives only.
    assert adv["ep-0/solver_0"] == pytest.approx(2 ** -0.5, abs=1e-4)
    assert adv["ep-0/solver_1"] == pytest.approx(-(2 ** -0.5), abs=1e-4)
    assert adv["ep-0/proposer_0"] == pytest.approx(0.0, abs=1e-6)


# ------------------------------------------------------------------ updates (torch engine)
@pytest.mark.parametrize("algorithm", TRAINED_ALGORITHMS)
def test_one_update_changes_every_trained_parameter(any_policy, algorithm):
    policy = any_policy
    turns = _turns(policy)
    learner = _learner(policy, algorithm=algorithm, lr=1e-3)
    before = _snapshot(policy.model)
    metrics = learner.update(turns)
    _assert_every_parameter_changed(policy.model, before)
    assert learner.steps == 1
    assert metrics["response_tokens"] == sum(len(t.response_ids) for t in turns)
    assert metrics["adv_abs_mean"] > 0
    assert metrics["grad_norm"] > 0
    assert metrics["logprob_drift"] < 1e-4  # on-policy data
    assert learner.engine.name == "torch"


def test_all_equal_rewards_leave_grpo_weights_unchanged(any_policy):
    policy = any_policy
    turns = _turns(policy)
    for t in turns:
        t.reward = 1.0
    learner = _learner(policy, lr=1e-2)
    before = _snapshot(policy.model)
    metrics = learner.update(turns)
    assert metrics["adv_abs_mean"] == 0.0
    _assert_unchanged(policy.model, before)


def test_empty_update_is_a_no_op(policy):
    learner = _learner(policy)
    before = _snapshot(policy.model)
    assert learner.update([]) == {}
    assert learner.steps == 0
    _assert_unchanged(policy.model, before)


def test_epochs_count_optimizer_steps(policy):
    learner = _learner(policy, epochs=3)
    learner.update(_turns(policy))
    assert learner.steps == 3


def test_micro_batches_give_the_same_gradient_as_one_batch(any_policy, new_policy):
    """The loss is normalised over the whole step, so splitting into micro-batches changes nothing."""
    policy = any_policy

    class Recording:
        name = "recording"

        def __init__(self, model):
            self.model = self.train_module = model
            self.grads = None

        def backward(self, loss, last=True):
            loss.backward()

        def gathered_params(self):
            return contextlib.nullcontext()

        def save(self, directory):
            pass

        def load(self, directory):
            pass

        def step(self):
            self.grads = {n: p.grad.detach().clone() for n, p in self.model.named_parameters()}
            self.model.zero_grad(set_to_none=True)
            return {}

    turns = _turns(policy, n_groups=2, per_group=4)
    grads = []
    for mbs in (256, 3, 1):
        p = new_policy()
        eng = Recording(p.model)
        Learner(p, LearnerConfig.from_flat(engine="torch", micro_batch_size=mbs), engine=eng).update(turns)
        grads.append(eng.grads)
    for other in grads[1:]:
        for n, g in grads[0].items():
            torch.testing.assert_close(other[n], g, atol=1e-7, rtol=1e-4)


def test_frozen_policy_is_untouched_by_the_other_learner(tiny_model_dir):
    from cogym.runners.train.build import build
    from cogym.runners.config.load import load_config

    cfg = load_config(None, [f"policies.proposer.model={tiny_model_dir}", f"policies.solver.model={tiny_model_dir}",
                             "learners.proposer.algorithm=frozen", "learners.solver.engine=torch",
                             "learners.solver.lr=1e-3", "game.num_games=1", "game.kwargs.num_solvers=2"])
    run = build(cfg)
    assert set(run.learners) == {"solver"}
    assert run.policies["proposer"].model is not run.policies["solver"].model
    frozen_before = _snapshot(run.policies["proposer"].model)
    solver_before = _snapshot(run.policies["solver"].model)
    run.learners["solver"].update(_turns(run.policies["solver"]))
    _assert_every_parameter_changed(run.policies["solver"].model, solver_before)
    _assert_unchanged(run.policies["proposer"].model, frozen_before)


def test_frozen_is_not_a_learner_algorithm(policy):
    with pytest.raises(ValueError, match="algorithm"):
        Learner(policy, LearnerConfig.from_flat(algorithm="frozen", engine="torch"))


@pytest.mark.parametrize("kl", [dict(kl_in_loss="k3", kl_loss_coef=0.1), dict(kl_in_reward="k1", kl_reward_coef=0.1)])
def test_reference_model_is_frozen_and_separate(any_policy, kl):
    policy = any_policy
    learner = _learner(policy, lr=1e-3, **kl)
    assert learner.ref_model is not None and learner.ref_model is not policy.model
    ref_before = _snapshot(learner.ref_model)
    before = _snapshot(policy.model)
    metrics = learner.update(_turns(policy))
    _assert_every_parameter_changed(policy.model, before)
    _assert_unchanged(learner.ref_model, ref_before)
    assert all(not p.requires_grad for p in learner.ref_model.parameters())
    assert ("kl_loss" in metrics) == ("kl_in_loss" in kl) and ("kl_reward" in metrics) == ("kl_in_reward" in kl)


def test_no_reference_model_without_kl(policy):
    assert _learner(policy).ref_model is None


def test_entropy_bonus_is_reported(any_policy):
    policy = any_policy
    metrics = _learner(policy, entropy_coef=0.01).update(_turns(policy))
    assert metrics["entropy"] > 0


def test_on_policy_ratio_is_one_at_any_sampling_temperature(any_policy):
    policy = any_policy
    turns = _turns(policy, temperature=0.5)
    metrics = Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-8), temperature=0.5).update(turns)
    assert metrics["logprob_drift"] < 1e-4
    # and the learner must be told: at temperature 1 the same turns are off-policy
    assert Learner(policy, LearnerConfig.from_flat(engine="torch", lr=1e-8)).update(turns)["logprob_drift"] > 1e-3


# ------------------------------------------------------------------ DeepSpeed engine
@pytest.fixture
def ds_cpu(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    os.environ["DS_ACCELERATOR"] = "cpu"


@pytest.mark.slow
def test_deepspeed_update_changes_every_parameter(ds_cpu, policy):
    turns = _turns(policy)
    learner = Learner(policy, LearnerConfig.from_flat(engine="deepspeed", lr=1e-3, micro_batch_size=3))
    assert learner.engine.name == "deepspeed"
    assert learner.engine.model is policy.model  # the bare HF module, shared with generation
    before = _snapshot(policy.model)
    metrics = learner.update(turns)
    _assert_every_parameter_changed(policy.model, before)
    assert metrics["adv_abs_mean"] > 0 and learner.steps == 1


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage, mbs", [
    (0, 256), (0, 3), (1, 3), (2, 3), (3, 256),
    (3, 3),
])
def test_deepspeed_and_torch_take_the_same_step(ds_cpu, tiny_model_dir, zero_stage, mbs):
    # The learner does not know which engine it has: same batch, same weights after one step,
    # however the step is split into micro-batches. max_grad_norm is high so clipping is not compared.
    turns = _turns(Policy.from_pretrained(tiny_model_dir))
    after = {}
    for key, cfg in (("torch", LearnerConfig.from_flat(engine="torch", lr=1e-3, max_grad_norm=100.0)),
                     ("deepspeed", LearnerConfig.from_flat(engine="deepspeed", lr=1e-3, max_grad_norm=100.0,
                                                 micro_batch_size=mbs, zero_stage=zero_stage))):
        p = Policy.from_pretrained(tiny_model_dir)
        learner = Learner(p, cfg)
        learner.update(turns)
        with learner.engine.gathered_params():
            after[key] = _snapshot(p.model)
    for n, v in after["deepspeed"].items():
        torch.testing.assert_close(v, after["torch"][n], atol=1e-5, rtol=0, msg=lambda m, n=n: f"{n}: {m}")


@pytest.mark.slow
def test_deepspeed_optimizer_state_round_trips(ds_cpu, policy, tmp_path):
    learner = Learner(policy, LearnerConfig.from_flat(engine="deepspeed", lr=1e-3))
    learner.update(_turns(policy))
    learner.engine.save(tmp_path)
    assert (tmp_path / "optimizer.pt").is_file()
    state = torch.load(tmp_path / "optimizer.pt", weights_only=True)
    learner.engine.load(tmp_path)
    assert len(state["state"]) == len(_trained_names(policy.model))


@pytest.mark.slow
def test_deepspeed_reports_grad_norm_like_torch(ds_cpu, policy):
    metrics = Learner(policy, LearnerConfig.from_flat(engine="deepspeed", lr=1e-3)).update(_turns(policy))
    assert "grad_norm" in metrics


@pytest.mark.slow
@pytest.mark.extended  # the first use builds DeepSpeed's CPU Adam (C++, ~100 s on 2 cores); docs/testing.md
@pytest.mark.parametrize("zero_stage, offload_optimizer, offload_params", [
    (1, True, False), (2, True, False), (3, True, True), (3, False, True),
])
def test_cpu_offload_from_config_takes_the_torch_step(ds_cpu, tiny_model_dir, zero_stage, offload_optimizer,
                                                      offload_params):
    """ZeRO-Offload (optimizer state and step on the CPU) and ZeRO-3 parameter offload, switched on from
    the learner config: DeepSpeed really offloads, and the step equals the torch engine's."""
    from cogym.learners.engines import deepspeed_config

    turns = _turns(Policy.from_pretrained(tiny_model_dir))
    after = {}
    for key, cfg in (("torch", LearnerConfig.from_flat(engine="torch", lr=1e-3, max_grad_norm=100.0)),
                     ("offload", LearnerConfig.from_flat(engine="deepspeed", lr=1e-3, max_grad_norm=100.0, micro_batch_size=3,
                                               zero_stage=zero_stage, offload_optimizer=offload_optimizer,
                                               offload_params=offload_params))):
        p = Policy.from_pretrained(tiny_model_dir)
        learner = Learner(p, cfg)
        if key == "offload":
            zero = deepspeed_config(cfg)["zero_optimization"]
            assert ("offload_optimizer" in zero) == offload_optimizer and ("offload_param" in zero) == offload_params
            zc = learner.engine.ds.zero_optimization()
            assert zc and learner.engine.ds.zero_optimization_stage() == zero_stage
            assert learner.engine.ds.zero_cpu_offload() == offload_optimizer
            if offload_params:
                assert learner.engine.ds.zero_offload_param() is not None
        learner.update(turns)
        with learner.engine.gathered_params():
            after[key] = _snapshot(p.model)
    for n, v in after["offload"].items():
        torch.testing.assert_close(v, after["torch"][n], atol=1e-5, rtol=0, msg=lambda m, n=n: f"{n}: {m}")


@pytest.mark.parametrize("offload_optimizer, offload_params", [(True, False), (False, True), (True, True)])
def test_offload_settings_reach_the_deepspeed_config(offload_optimizer: bool, offload_params: bool) -> None:
    """The learner config's offload switches as DeepSpeed reads them (the offloaded step itself, which
    builds DeepSpeed's CPU Adam: the extended test above)."""
    from cogym.learners.engines import deepspeed_config

    cfg = LearnerConfig.from_flat(engine="deepspeed", zero_stage=3, offload_optimizer=offload_optimizer,
                                  offload_params=offload_params)
    zero = deepspeed_config(cfg)["zero_optimization"]
    assert zero.get("offload_optimizer") == ({"device": "cpu"} if offload_optimizer else None)
    assert zero.get("offload_param") == ({"device": "cpu"} if offload_params else None)


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_zero_buckets_are_capped_at_the_model_size(zero_stage: int) -> None:
    """ZeRO allocates its gradient buckets whole at start (DeepSpeed's default, 500M elements, is 2 GB of
    address space at ZeRO-3 for any model): they are capped at the trainable parameter count."""
    from cogym.learners.engines import DEEPSPEED_BUCKET, deepspeed_config

    cfg = LearnerConfig.from_flat(engine="deepspeed", zero_stage=zero_stage)
    small = deepspeed_config(cfg, trainable=1_000_001)["zero_optimization"]
    large = deepspeed_config(cfg, trainable=7_000_000_000)["zero_optimization"]
    if zero_stage == 0:
        assert "reduce_bucket_size" not in small and "reduce_bucket_size" not in large
    else:
        assert small["reduce_bucket_size"] == small["allgather_bucket_size"] == 1_000_448  # 977 x 1024, the next multiple
        assert large["reduce_bucket_size"] == DEEPSPEED_BUCKET
    assert "reduce_bucket_size" not in deepspeed_config(cfg)["zero_optimization"]  # unknown size: DeepSpeed's own


def test_a_zero3_engine_reserves_no_more_than_its_model_needs(ds_cpu, tiny_model_dir) -> None:
    """The address space one ZeRO-3 engine of the tiny model adds stays far below the 2 GB a default bucket
    takes (a test process that kept such engines grew past the machine's memory and could no longer fork)."""
    import os

    def vm_mb() -> int:
        with open(f"/proc/{os.getpid()}/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmSize"))

    if not os.path.exists(f"/proc/{os.getpid()}/status"):
        pytest.skip("needs /proc (Linux) to read the process's address space")
    p = Policy.from_pretrained(tiny_model_dir)
    before = vm_mb()
    learner = Learner(p, LearnerConfig.from_flat(engine="deepspeed", zero_stage=3))
    grown = vm_mb() - before
    assert learner.engine.ds.zero_optimization_stage() == 3
    assert grown < 1500, f"a ZeRO-3 engine of the tiny model added {grown} MB of address space"
