"""SPIN (learners/algorithms/spin.py, trained by the common Learner): the loss by hand, its gradient, the opponent's refresh cadence, learning
on a fixed batch, pairing with the games' ``info["reference"]``, checkpoints and config errors."""

from __future__ import annotations

import math
import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import pytest
import torch

from cogym.agents.llm import LLMAgent
from cogym.agents.loading import tiny_model_path
from cogym.agents.policy import Policy
from cogym.core.types import SamplingParams
from cogym.agents.scripted import ScriptedAgent
from cogym.core.types import Turn
from cogym.envs import make
from cogym.envs.generator_verifier import SCRIPTED as GV_SCRIPTED
from cogym.learners.config import LearnerConfig
from cogym.learners.algorithms.spin import OPPONENT_FILE, end_of_message_id, reference_ids, spin_loss
from cogym.learners.learner import Learner
from cogym.runners.rollout.turns import rollout

LOG2 = math.log(2.0)
PROBLEMS = [("37+45", "82"), ("12*9", "108"), ("50-61", "-11"), ("3+4", "7")]


def cfg(**kw) -> LearnerConfig:
    base = dict(algorithm="spin", engine="torch", lr=1e-3, spin_beta=0.1, spin_refresh=1000)
    return LearnerConfig.from_flat(**{**base, **kw})


def sampled_turns(policy: Policy, problems=PROBLEMS, per_problem: int = 2, seed: int = 0, temperature: float = 1.0,
                  max_new_tokens: int = 5) -> list[Turn]:
    """The policy's own samples for each problem, as solver turns whose info carries the reference."""
    torch.manual_seed(seed)
    asks = [(q, a) for q, a in problems for _ in range(per_problem)]
    prompts = [policy.render([{"role": "system", "content": "Solve."}, {"role": "user", "content": q}]) for q, _ in asks]
    gens = policy.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature))
    return [Turn(i, f"e{i}", "solver_0", "solver", "p", g.prompt_ids, g.response_ids, g.logprobs, g.text, g.finished,
                 reward=0.0, group_key=(f"e{i}", "solver"), info={"role": "solver", "reference": a})
            for i, (g, (_, a)) in enumerate(zip(gens, asks))]


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    wb = b.state_dict()
    return all(torch.equal(v, wb[k]) for k, v in a.state_dict().items())


# ----------------------------------------------------------------------------- the pure loss
def test_spin_loss_by_hand() -> None:
    # pair 0: margin = (-2 - -3) - (-1 - -1.5) = 1 - 0.5 = 0.5;  beta*margin = 0.05
    #         loss = log(1 + e^-0.05) = log(1 + 0.9512294) = log(1.9512294) = 0.6684597
    # pair 1: margin = (-4 - -2) - (-1 - -2) = -2 - 1 = -3;      beta*margin = -0.3
    #         loss = log(1 + e^0.3) = log(1 + 1.3498588) = log(2.3498588) = 0.8543552
    loss, margin = spin_loss(torch.tensor([-2.0, -4.0]), torch.tensor([-3.0, -2.0]), torch.tensor([-1.0, -1.0]),
                             torch.tensor([-1.5, -2.0]), beta=0.1)
    assert margin.tolist() == pytest.approx([0.5, -3.0])
    assert loss.tolist() == pytest.approx([0.6684597, 0.8543552], abs=1e-6)
    # beta = 0.5 on pair 1: t = -1.5, loss = log(1 + e^1.5) = log(5.4816891) = 1.7014132
    assert float(spin_loss(*(torch.tensor([x]) for x in (-4.0, -2.0, -1.0, -2.0)), beta=0.5)[0]) == pytest.approx(1.7014132, abs=1e-6)


def test_spin_loss_is_stable_for_huge_margins() -> None:
    z = torch.zeros(2)
    loss, _ = spin_loss(torch.tensor([1e4, -1e4]), z, z, z, beta=1.0)
    assert torch.isfinite(loss).all()
    assert loss.tolist() == pytest.approx([0.0, 1e4])


def test_spin_loss_gradient_pushes_real_up_and_generated_down() -> None:
    args = [torch.tensor([-2.0, -5.0, -1.0], requires_grad=True) for _ in range(4)]
    with torch.no_grad():
        args[1] += torch.tensor([0.3, -1.0, 0.0])
    loss, _ = spin_loss(*args, beta=0.1)
    loss.sum().backward()
    real, real_opp, gen, gen_opp = (a.grad for a in args)
    assert (real < 0).all() and (gen > 0).all()  # descent raises log pi(y) and lowers log pi(y')
    assert torch.allclose(real_opp, -real) and torch.allclose(gen_opp, -gen)
    # at margin 0 the slope is exactly -beta/2 on the real response
    assert args[0].grad[2] == pytest.approx(-0.05)


def test_spin_loss_rejects_bad_shapes_and_beta() -> None:
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="one shape"):
        spin_loss(x, x, x, torch.zeros(2), beta=0.1)
    with pytest.raises(ValueError, match="beta must be"):
        spin_loss(x, x, x, x, beta=0.0)


# ----------------------------------------------------------------------------- real responses
def test_real_response_ends_exactly_like_a_generated_one() -> None:
    """Rollouts of the embedded tiny model end finished responses with <|end|> (id 3), right after the
    answer's characters; a right answer's response ids are exactly the reference's ids."""
    if not (tiny_model_path() / "config.json").is_file():
        pytest.skip("the embedded tiny model is not built")
    policy = Policy.from_pretrained("tiny", device="cpu")
    end = end_of_message_id(policy)
    assert end == policy.tokenizer.convert_tokens_to_ids("<|end|>") == policy.tokenizer.eos_token_id
    assert reference_ids(policy, "-82") == policy.tokenizer.convert_tokens_to_ids(["-", "8", "2", "<|end|>"])
    agent = LLMAgent(policy, SamplingParams(max_new_tokens=8, temperature=0.0))
    oracle = ScriptedAgent(GV_SCRIPTED["verifier"]["oracle"], "oracle")
    games = [make("generator_verifier-v0") for _ in range(24)]
    res = rollout(games, lambda seat, role: ("p", agent if role == "generator" else oracle),
                  {"generator": "Solve."}, seeds=list(range(24)))
    assert len(res.turns) == 24 and all(t.info["reference"] is not None for t in res.turns)
    finished = [t for t in res.turns if t.finished]
    assert finished and all(t.response_ids[-1] == end and end not in t.response_ids[:-1] for t in finished)
    right = [t for t in res.turns if t.info["correct"]]
    assert right  # the tiny model gets some right greedily
    for t in right:
        assert t.response_ids == reference_ids(policy, t.info["reference"])
    learner = Learner(policy, cfg())
    real, gen = learner.algorithm.pairs(res.turns)
    assert [r.response_ids for r in real[:1]] == [reference_ids(policy, res.turns[0].info["reference"])]
    assert all(r.prompt_ids == g.prompt_ids for r, g in zip(real, gen))
    m = learner.update(res.turns)
    assert m["spin_pairs"] == 24 and m["loss"] == pytest.approx(LOG2, abs=1e-6)


def test_logprobs_are_taken_at_the_rollout_temperature(any_policy) -> None:
    policy = any_policy
    turns = sampled_turns(policy, temperature=0.7)
    m = Learner(policy, cfg(lr=1e-8), temperature=0.7).update(turns)
    behaviour = sum(sum(t.logprobs) for t in turns) / len(turns)
    assert m["spin_gen_logp"] == pytest.approx(behaviour, abs=1e-4)


# ----------------------------------------------------------------------------- the learner
def test_zero_margin_whenever_the_opponent_was_just_refreshed(policy) -> None:
    turns = sampled_turns(policy)
    learner = Learner(policy, cfg(spin_refresh=1, lr=1e-2))
    for _ in range(3):
        m = learner.update(turns)
        assert m["spin_margin"] == pytest.approx(0.0, abs=1e-5) and m["loss"] == pytest.approx(LOG2, abs=1e-6)
        assert m["spin_refreshed"] == 1.0 and same(learner.algorithm.opponent, policy.model)
    assert learner.steps == 3 and learner.algorithm.updates == 3


def test_opponent_refresh_follows_spin_refresh(policy) -> None:
    turns = sampled_turns(policy, per_problem=1)
    learner = Learner(policy, cfg(spin_refresh=3, lr=1e-2, epochs=2))
    initial = weights(learner.algorithm.opponent)
    for u in range(1, 8):
        m = learner.update(turns)
        # refreshed after updates 3 and 6 (the counter counts updates, not the 2 optimizer steps of each)
        assert m["spin_refreshed"] == float(u % 3 == 0)
        assert same(learner.algorithm.opponent, policy.model) == (u % 3 == 0), u
        if u < 3:
            assert all(torch.equal(v, learner.algorithm.opponent.state_dict()[k]) for k, v in initial.items())
    assert learner.steps == 14 and learner.algorithm.updates == 7


def test_margin_grows_and_the_real_response_becomes_likelier(policy) -> None:
    turns = sampled_turns(policy)
    learner = Learner(policy, cfg(lr=3e-3, spin_beta=0.5))
    history = [learner.update(turns) for _ in range(6)]
    margins = [m["spin_margin"] for m in history]
    assert margins[0] == pytest.approx(0.0, abs=1e-5)
    assert all(b > a for a, b in zip(margins, margins[1:])), margins
    assert history[-1]["loss"] < LOG2
    assert history[-1]["spin_real_logp"] > history[0]["spin_real_logp"] + 1.0
    assert history[-1]["spin_gen_logp"] < history[0]["spin_gen_logp"]
    assert all(math.isfinite(m["grad_norm"]) for m in history)


def test_micro_batches_give_the_step_of_one_batch(policy, tiny_model_dir) -> None:
    turns = sampled_turns(policy, per_problem=1)
    other = Policy.from_pretrained(tiny_model_dir)
    results = []
    for p, mb in ((policy, 256), (other, 3)):  # 3 rows -> one pair per micro-batch
        learner = Learner(p, cfg(lr=1e-2, micro_batch_size=mb))
        learner.update(turns)
        results.append(learner.update(turns))
    assert results[1]["loss"] == pytest.approx(results[0]["loss"], abs=1e-6)
    assert results[1]["spin_margin"] == pytest.approx(results[0]["spin_margin"], abs=1e-4)
    wa, wb = weights(policy.model), weights(other.model)
    # two Adam steps of lr 1e-2: micro-batches sum the gradient in another order, and CPUs round those sums
    # differently (up to 1.2e-5 measured on an AVX2 machine), a thousandth of a step
    assert all(torch.allclose(wa[k], wb[k], atol=5e-5) for k in wa)


def test_turns_without_a_reference_are_skipped(policy, tiny_model_dir) -> None:
    turns = sampled_turns(policy, per_problem=1)
    extra = sampled_turns(policy, problems=[("9+9", "18"), ("1+1", "2")], per_problem=1, seed=1)
    extra[0].info = {"role": "solver", "reference": None}  # e.g. an invalid proposal
    extra[1].info = {"role": "proposer"}  # a role without one
    learner = Learner(policy, cfg(lr=1e-2))
    before = weights(policy.model)
    assert learner.update(extra) == {"spin_pairs": 0.0}  # nothing to learn from: no step
    assert learner.steps == 0 and learner.algorithm.updates == 0
    assert all(torch.equal(v, policy.model.state_dict()[k]) for k, v in before.items())
    m = learner.update([extra[0], *turns, extra[1]])
    assert m["spin_pairs"] == len(turns)
    # the skipped turns change nothing: the step equals one on the paired turns alone
    other = Policy.from_pretrained(tiny_model_dir)
    Learner(other, cfg(lr=1e-2)).update(turns)
    wa, wb = weights(policy.model), weights(other.model)
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_save_load_restores_the_opponent_and_continues_exactly(policy, tiny_model_dir, tmp_path) -> None:
    turns = sampled_turns(policy)
    c = cfg(lr=1e-2, spin_refresh=2)
    learner = Learner(policy, c)
    learner.update(turns)  # update 1: the policy moved, the opponent did not
    policy.save(tmp_path / "policy")
    learner.save(tmp_path / "learner")
    assert (tmp_path / "learner" / OPPONENT_FILE).is_file()
    opponent = weights(learner.algorithm.opponent)
    straight = learner.update(turns)  # update 2: trains against the old opponent, then refreshes
    assert straight["spin_margin"] > 0 and straight["spin_refreshed"] == 1.0

    resumed_policy = Policy.from_pretrained(tmp_path / "policy")
    resumed = Learner(resumed_policy, c)
    assert not all(torch.equal(v, resumed.algorithm.opponent.state_dict()[k]) for k, v in opponent.items())
    resumed.load(tmp_path / "learner")
    assert all(torch.equal(v, resumed.algorithm.opponent.state_dict()[k]) for k, v in opponent.items())
    assert (resumed.steps, resumed.algorithm.updates) == (1, 1)
    again = resumed.update(turns)
    for key in ("loss", "spin_margin", "spin_real_logp", "spin_gen_logp", "grad_norm", "spin_refreshed"):
        assert again[key] == pytest.approx(straight[key], abs=1e-6), key
    wa, wb = weights(policy.model), weights(resumed_policy.model)
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)  # the optimizer state came back too
    assert same(resumed.algorithm.opponent, resumed_policy.model)


def test_load_without_a_checkpoint_is_a_clear_error(policy, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=OPPONENT_FILE):
        Learner(policy, cfg()).load(tmp_path)


def test_deepspeed_engine_zero_stage_0(policy, tmp_path) -> None:
    turns = sampled_turns(policy, per_problem=1)
    learner = Learner(policy, cfg(engine="deepspeed", zero_stage=0, lr=1e-2, spin_refresh=3, micro_batch_size=4))
    assert learner.engine.name == "deepspeed"
    first, second = learner.update(turns), learner.update(turns)
    assert first["loss"] == pytest.approx(LOG2, abs=1e-6) and first["grad_norm"] > 0
    assert second["spin_margin"] > 0 and second["loss"] < LOG2
    learner.save(tmp_path)
    assert {"optimizer.pt", OPPONENT_FILE, "state.json"} <= {p.name for p in tmp_path.iterdir()}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"role_algorithms": {"solver": "grpo"}}, "role_algorithms must be empty"),
        ({"kl_in_reward": "k1"}, "kl_in_reward and kl_in_loss must be 'off'"),
        ({"kl_in_loss": "k3"}, "kl_in_reward and kl_in_loss must be 'off'"),
        ({"entropy_coef": 0.01}, "entropy_coef must be 0"),
        ({"dynamic_sampling": "std_gt_0"}, "dynamic_sampling must be 'off'"),
        ({"mask_truncated": True}, "mask_truncated must be False"),
        ({"spin_beta": 0.0}, "spin_beta must be a finite number > 0"),
        ({"spin_beta": float("inf")}, "spin_beta must be a finite number > 0"),
        ({"spin_refresh": 0}, "spin_refresh must be an int >= 1"),
    ],
)
def test_config_errors(policy, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Learner(policy, cfg(**kwargs))


def test_temperature_must_be_positive(policy) -> None:
    with pytest.raises(ValueError, match="temperature must be > 0"):
        Learner(policy, cfg(), temperature=0.0)
