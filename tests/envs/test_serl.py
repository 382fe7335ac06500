"""SeRL's self-instruction in proposer_solver-v0: few-shot seeds, the novelty filter and its shared pool,
and the problem-diversity metrics a rollout logs."""

from __future__ import annotations

import copy
import pickle
from importlib import resources

import numpy as np
import pytest

from cogym.envs import make
from cogym.envs.arithmetic import PROPOSER_REQUEST, load_heldout
from cogym.envs.checks import check_game
from cogym.envs.errors import DatasetError
from cogym.envs.novelty import NoveltyFilter, clear_pools, shared_pool
from cogym.envs.proposer_solver import few_shot_text
from cogym.envs.seeds import load_seeds
from cogym.envs.search import NgramEmbedder
from cogym.envs.testing import step_as as act
from cogym.runners.rollout.loop import RolloutResult
from cogym.runners.train.metrics import problem_diversity, rollout_metrics

GAME = "proposer_solver-v0"
SEEDS = "serl_seeds.jsonl"


@pytest.fixture(autouse=True)
def fresh_pools():
    """Every test starts and ends with no shared pool in this process."""
    clear_pools()
    yield
    clear_pools()


def shipped_seeds() -> list[str]:
    return load_seeds(SEEDS, make(GAME).domain)


def cos(a: str, b: str) -> float:
    v = NgramEmbedder().embed([a, b])
    return float(v[0] @ v[1])


# ----------------------------------------------------------------------------- the filter
def test_filter_rejects_planted_near_duplicates_and_accepts_distinct_problems() -> None:
    f = NoveltyFilter(threshold=0.8, capacity=100)
    for text in ["123456+654321", "777*3", "15-999", "40+2"]:
        assert f.add(text)
    near = f.check("123456+654329")  # one digit changed in a long problem: similarity ~0.84
    assert not near.novel and near.neighbour == "123456+654321"
    assert near.similarity == pytest.approx(cos("123456+654321", "123456+654329"), abs=1e-5) and near.similarity >= 0.8
    same = f.check("777*3")
    assert not same.novel and same.neighbour == "777*3" and same.similarity == pytest.approx(1.0, abs=1e-5)
    for distinct in ["123456*654321", "8-8", "91+88", "1000-1"]:  # the first still shares digits: ~0.65
        verdict = f.check(distinct)
        assert verdict.novel, (distinct, verdict)
        assert verdict.similarity is not None and verdict.similarity < 0.8
    assert NoveltyFilter(0.8).check("1+1") == NoveltyFilter(0.8).check("2+2")  # an empty pool: novel, no neighbour
    assert NoveltyFilter(0.8).check("1+1").neighbour is None


def test_filter_is_bounded_and_forgets_the_oldest_tenth_first() -> None:
    f = NoveltyFilter(threshold=0.9, capacity=10)
    problems = [f"{i}+{1000 - i}" for i in range(25)]
    for p in problems:
        f.add(p)
    assert len(f) <= 10
    assert f.texts == problems[-len(f):]  # the newest, in order
    assert f.check(problems[0]).novel  # forgotten
    assert not f.check(problems[-1]).novel
    assert not f.add(problems[-1])  # already there: not added twice
    assert len(f) == len(set(f.texts))


def test_seed_problems_are_permanent_and_outside_the_capacity() -> None:
    f = NoveltyFilter(threshold=0.9, capacity=3)
    f.seed(["12+7", "6*8"])
    f.seed(["6*8"])  # idempotent
    assert f.seeds == ["12+7", "6*8"]
    for i in range(20):
        f.add(f"{100 + i}-{i}")
    assert len(f) <= 3 and f.seeds == ["12+7", "6*8"]
    copied = f.check("6*8")
    assert not copied.novel and copied.neighbour == "6*8" and copied.seed
    assert not f.add("12+7")  # a seed never enters the bounded part


def test_judge_replays_an_episode_and_does_not_judge_siblings_against_each_other() -> None:
    f = NoveltyFilter(threshold=0.8, capacity=50)
    first = f.judge("123456+654321", episode=(1, 0))
    assert first.novel and len(f) == 1
    # A replay of the episode: the same verdict, not "a duplicate of itself".
    assert f.judge("123456+654321", episode=(1, 0)) == first
    # A sibling of the same group (same reset seed) is not compared with the first...
    assert f.judge("123456+654329", episode=(1, 0)).novel
    # ...but any other episode is compared with both.
    other = f.judge("123456+654321", episode=(2, 0))
    assert not other.novel and other.neighbour == "123456+654321"
    assert f.judge("123456+654321", episode=(2, 0)) == other  # its replay: rejected again, same reason
    assert not f.judge("123456+654321", episode=None).novel  # an unseeded game: no memory, compared with all


@pytest.mark.parametrize("kwargs, message", [({"threshold": 0.0}, "threshold must be"), ({"threshold": 1.5}, "threshold must be"),
                                             ({"threshold": 0.5, "capacity": 0}, "capacity must be")])
def test_filter_arguments_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NoveltyFilter(**kwargs)


def test_shared_pools_are_keyed_by_name_and_settings() -> None:
    a = shared_pool("run", 0.7, 64)
    assert shared_pool("run", 0.7, 64) is a
    assert shared_pool("other", 0.7, 64) is not a and shared_pool("run", 0.8, 64) is not a and shared_pool("run", 0.7, 65) is not a
    clear_pools()
    assert shared_pool("run", 0.7, 64) is not a


# ----------------------------------------------------------------------------- the game's filter
def novel_game(**kwargs):
    return make(GAME, **{"num_solvers": 2, "max_operand": 999_999, "novelty": 0.8, "novelty_pool": "test", **kwargs})


def test_a_near_duplicate_proposal_is_an_invalid_move_naming_the_earlier_problem() -> None:
    a, b = novel_game(invalid_penalty=-0.5), novel_game(invalid_penalty=-0.5)
    a.reset(seed=1)
    act(a, "proposer", "123456 + 654321 =")
    assert a.agent_selection == "solver_0"  # accepted: posed to the solvers
    act(a, "solver_0", "777777")
    act(a, "solver_1", "0")
    assert a.infos["proposer"]["metrics"] == {"novelty_rejected": False, "novelty_similarity": None}  # the pool was empty
    assert a.infos["proposer"]["problem"] == "123456+654321"
    # Another copy (a training run's next game) shares the pool: the planted near-duplicate is rejected.
    b.reset(seed=2)
    assert act(b, "proposer", "123456+654329") == {"proposer": -0.5, "solver_0": 0.0, "solver_1": 0.0}
    info = b.infos["proposer"]
    assert info["invalid"] is True and info["problem"] is None
    assert "near-duplicate of the earlier problem '123456+654321'" in info["reason"]
    similarity = info["metrics"]["novelty_similarity"]
    assert info["metrics"]["novelty_rejected"] is True and similarity == pytest.approx(cos("123456+654321", "123456+654329"), abs=1e-5)
    assert f"cosine similarity {similarity:.3f} >= novelty 0.8" in info["reason"]
    assert "proposer's move was invalid" in b.infos["solver_0"]["reason"] and b.infos["solver_0"]["correct"] is None
    assert all(b.terminations.values())
    # A distinct problem is still accepted, and a pool of another name knows nothing of the first.
    b.reset(seed=3)
    act(b, "proposer", "42*17")
    assert b.agent_selection == "solver_0"
    c = novel_game(novelty_pool="elsewhere")
    c.reset(seed=2)
    act(c, "proposer", "123456+654329")
    assert c.agent_selection == "solver_0" and c.infos["proposer"] == {"role": "proposer"}


def test_copying_a_seed_example_is_rejected_and_garbage_has_no_novelty_verdict() -> None:
    env = make(GAME, num_solvers=1, seeds=SEEDS, few_shot=2, novelty=0.9, novelty_pool="test")
    env.reset(seed=0)
    shown = env.observe("proposer")["text"].split("\n")[0].split(": ")[1].split(", ")
    act(env, "proposer", shown[0])
    assert env.infos["proposer"]["invalid"] and f"near-duplicate of the seed problem {shown[0]!r}" in env.infos["proposer"]["reason"]
    env.reset(seed=1)
    act(env, "proposer", "not a problem")
    assert env.infos["proposer"]["metrics"] == {"novelty_rejected": None, "novelty_similarity": None}
    assert "not a problem of the form" in env.infos["proposer"]["reason"]


def test_a_game_copy_holds_only_the_pool_settings() -> None:
    env = novel_game()
    env.reset(seed=0)
    act(env, "proposer", "5+5")
    twin = pickle.loads(pickle.dumps(copy.deepcopy(env)))  # pickles: no faiss index or lock inside
    assert twin.novelty_filter() is env.novelty_filter() and "5+5" in twin.novelty_filter().texts


# ----------------------------------------------------------------------------- few-shot seeds
def test_few_shot_examples_are_drawn_from_the_seed_file_with_the_game_rng() -> None:
    seeds = shipped_seeds()
    assert len(seeds) == 24 and not set(seeds) & {r["question"] for r in load_heldout()}
    env = make(GAME, num_solvers=1, seeds=SEEDS, few_shot=3)
    texts = {}
    for seed in range(6):
        env.reset(seed=seed)
        text = env.observe("proposer")["text"]
        picks = np.random.default_rng(seed).choice(len(seeds), size=3, replace=False)
        assert text == few_shot_text([seeds[int(i)] for i in picks])
        assert text.startswith("Example problems: ") and text.endswith("\n" + PROPOSER_REQUEST)
        assert env.observation_space("proposer").contains(env.observe("proposer"))
        texts[seed] = text
    assert len(set(texts.values())) == 6
    other = make(GAME, num_solvers=1, seeds=SEEDS, few_shot=3)
    other.reset(seed=4)
    assert other.observe("proposer")["text"] == texts[4]  # the same seed, the same examples
    env.reset(seed=None)  # no seed: the game's RNG draws on
    assert env.observe("proposer")["text"].endswith(PROPOSER_REQUEST)
    assert few_shot_text(["12+7"]) == "Example problem: 12+7\n" + PROPOSER_REQUEST


@pytest.mark.parametrize("kwargs", [{}, {"seeds": SEEDS}, {"seeds": SEEDS, "novelty": 0.7, "novelty_pool": "test"}])
def test_without_few_shot_the_proposer_text_and_the_rng_are_unchanged(kwargs: dict) -> None:
    env = make(GAME, num_solvers=1, **kwargs)
    env.reset(seed=11)
    assert env.observe("proposer")["text"] == PROPOSER_REQUEST == "Propose a problem."
    assert env.np_random.bit_generator.state == np.random.default_rng(11).bit_generator.state  # nothing drawn
    with_shots = make(GAME, num_solvers=1, seeds=SEEDS, few_shot=1)
    with_shots.reset(seed=11)
    assert with_shots.np_random.bit_generator.state != np.random.default_rng(11).bit_generator.state


def test_the_longest_few_shot_prompt_fits_the_observation_space(write_jsonl) -> None:
    path = write_jsonl([{"question": f"{999_980 + i}*{999_999 - i}"} for i in range(16)], name="long_seeds.jsonl")
    env = make(GAME, num_solvers=1, max_operand=999_999, seeds=path, few_shot=16)
    env.reset(seed=0)
    obs = env.observe("proposer")
    assert obs["text"].count(",") == 15 and env.observation_space("proposer").contains(obs)


def test_seed_files_in_text_form_and_bad_seed_files(tmp_path, write_jsonl) -> None:
    text = tmp_path / "seeds.txt"
    text.write_text("# examples\n 1 + 2 =\n\n3*4\n1+2\n", encoding="utf-8")
    assert load_seeds(str(text), make(GAME).domain) == ["1+2", "3*4"]
    with pytest.raises(DatasetError, match="line 2: '200\\+1' is not a problem of this game"):
        make(GAME, seeds=write_jsonl([{"question": "1+1"}, {"question": "200+1"}]))
    with pytest.raises(DatasetError, match="line 1: each line must be an object with a string 'question'"):
        make(GAME, seeds=write_jsonl([{"problem": "1+1"}]))
    with pytest.raises(DatasetError, match="does not exist"):
        make(GAME, seeds="no_such_seeds.jsonl")
    assert str(resources.files("cogym.envs").joinpath("data", SEEDS)).endswith(SEEDS)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"few_shot": 2}, "few_shot=2 needs seeds="),
        ({"few_shot": 25, "seeds": SEEDS}, "few_shot must be an int in \\[0, 16\\]"),
        ({"few_shot": -1}, "few_shot must be an int in"),
        ({"novelty": 0.0}, "novelty must be a cosine similarity in \\(0, 1\\]"),
        ({"novelty": float("nan")}, "novelty must be a finite number"),
        ({"novelty_pool": "x"}, "only used with novelty="),
        ({"novelty_size": 10}, "only used with novelty="),
        ({"novelty": 0.5, "novelty_size": 0}, "novelty_size must be an int in"),
        ({"novelty": 0.5, "novelty_pool": ""}, "novelty_pool must be a non-empty name"),
        ({"seeds": 3}, "seeds must be the path of a seed file"),
    ],
)
def test_self_instruction_arguments_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(GAME, **kwargs)


def test_few_shot_beyond_the_seed_file_and_options_of_a_dataset_game_are_errors(write_jsonl, heldout_path: str) -> None:
    with pytest.raises(ValueError, match="few_shot=3 exceeds the 2 distinct problems"):
        make(GAME, seeds=write_jsonl([{"question": "1+1"}, {"question": "1 + 1"}, {"question": "2+2"}]), few_shot=3)
    for option in ({"seeds": SEEDS}, {"novelty": 0.5}):
        with pytest.raises(ValueError, match="only used with source='proposer'"):
            make(GAME, source="dataset", dataset=heldout_path, **option)


# ----------------------------------------------------------------------------- the contract
def test_the_serl_game_passes_check_game(monkeypatch: pytest.MonkeyPatch) -> None:
    verdicts = []
    judge = NoveltyFilter.judge

    def recorded(self, text, episode=None):
        verdicts.append(judge(self, text, episode))
        return verdicts[-1]

    monkeypatch.setattr(NoveltyFilter, "judge", recorded)
    # A low threshold, so check_game's episodes meet both verdicts: accepted and rejected proposals.
    kwargs = {"num_solvers": 3, "verifier": "majority", "proposer_reward": "band", "seeds": SEEDS, "few_shot": 2,
              "novelty": 0.3, "novelty_pool": "check", "novelty_size": 16}
    check_game(GAME, kwargs, episodes=16)
    assert {v.novel for v in verdicts} == {True, False}
    pool = shared_pool("check", 0.3, 16)
    assert pool.seeds == shipped_seeds() and 0 < len(pool) <= 16
    assert make(GAME, **kwargs).spec.outcomes["proposer"] == ("invalid", "metrics")
    assert make(GAME).spec.outcomes["proposer"] == ("invalid",)


# ----------------------------------------------------------------------------- diversity metrics
def test_problem_diversity_on_a_hand_made_set() -> None:
    problems = ["12+7", "12+7", "123456+654321", "123456+654329", "8*9"]
    d = problem_diversity(problems)
    assert d["distinct_problems"] == 4.0
    near = cos("123456+654321", "123456+654329")
    best_for_8x9 = max(cos("8*9", p) for p in problems[:4])
    expected = (0.0 + 0.0 + (1 - near) + (1 - near) + (1 - best_for_8x9)) / 5
    assert d["nn_distance"] == pytest.approx(expected, abs=1e-5)
    assert problem_diversity(["1+1", "1+1", "1+1"]) == pytest.approx({"distinct_problems": 1.0, "nn_distance": 0.0}, abs=1e-6)
    assert problem_diversity(["1+1"]) == {"distinct_problems": 1.0}  # no neighbour to measure
    spread = problem_diversity(["12+7", "345*6", "90-81"])["nn_distance"]
    assert spread > d["nn_distance"]


def test_rollout_metrics_logs_the_proposers_problem_diversity() -> None:
    def game(problem):
        return {"proposer": {"role": "proposer", "problem": problem, "invalid": problem is None},
                "solver_0": {"role": "solver", "problem": problem, "correct": None if problem is None else True}}

    infos = [game("12+7"), game("12+7"), game(None), game("8*9")]
    res = RolloutResult(turns=[], returns=[{"proposer": 0.0, "solver_0": 1.0}] * 4, infos=infos)
    m = rollout_metrics(res, ("proposer", "solver"))
    assert m["proposer/distinct_problems"] == 2.0  # the invalid proposal posed nothing
    assert m["proposer/nn_distance"] == pytest.approx(problem_diversity(["12+7", "12+7", "8*9"])["nn_distance"])
    assert not any(k.startswith("solver/") and ("distinct" in k or "nn_distance" in k) for k in m)
    no_problem = rollout_metrics(RolloutResult(turns=[], returns=[{}], infos=[{"proposer": {"role": "proposer"}}]), ("proposer",))
    assert "proposer/distinct_problems" not in no_problem
