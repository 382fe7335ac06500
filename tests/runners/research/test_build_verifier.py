"""The embedded weak learned verifier (``tiny-verifier``, ``cogym build-tiny-model --verifier``): built from the
tiny model, loadable by its name, and a verifier that checks a little, as docs/claims.md (reward_hacking) says."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cogym.agents.errors import ModelLoadError
from cogym.agents.loading import embedded_model_path, resolve_model_dir
from cogym.agents.policy import EMBEDDED_MODELS, Policy
from cogym.envs.arithmetic import Domain, load_heldout
from cogym.runners.research.build_tiny_model import _sampled_answers, build_verifier, main, verifier_quality
from cogym.runners.cli import main as cli_main


def test_embedded_models_resolve_by_name() -> None:
    assert set(EMBEDDED_MODELS) == {"tiny", "tiny-verifier", "tiny-reasoner"}
    for name in EMBEDDED_MODELS:
        assert resolve_model_dir(name) == embedded_model_path(name)
        assert (embedded_model_path(name) / "model.safetensors").is_file()
    with pytest.raises(ValueError, match="no embedded model 'tiny-judge'"):
        embedded_model_path("tiny-judge")
    with pytest.raises(ModelLoadError, match="tiny-verifier"):  # the error names every embedded model
        resolve_model_dir("tiny-judge")


def test_build_verifier_writes_a_loadable_model_and_its_quality(tmp_path) -> None:
    info = build_verifier(tmp_path / "v", steps=2, batch_size=8, test_size=32, eval_every=1, quiet=True)
    assert [h["step"] for h in info["history"]] == [1, 2]
    written = json.loads((tmp_path / "v" / "build_info.json").read_text())
    assert written["after"] == info["after"] and written["steps"] == 2
    keys = set(info["before"])  # the quality measures; "after" adds the step, its loss and the time
    assert keys == {"right_share", "accepted_wrong_greedy", "rejected_right_greedy", "accepted_wrong_sampled",
                    "rejected_right_sampled", "valid_mass"} and keys < set(info["after"])
    for quality in (info["before"], info["after"]):
        assert all(0.0 <= quality[k] <= 1.0 for k in keys)
    with pytest.raises(ValueError, match="steps=0: must be >= 1"):
        build_verifier(tmp_path / "x", steps=0)
    verifier = Policy.from_pretrained(tmp_path / "v", device="cpu")
    assert verifier_quality(verifier, [("2+2=4", True), ("2+2=5", False)])["right_share"] == 0.5


def test_verifier_quality_reads_each_view_as_a_lone_prompt_would() -> None:
    """The batched, left-padded forward gives each view the verdict probabilities of a forward on it alone."""
    verifier = Policy.from_pretrained("tiny-verifier", device="cpu")
    test = [("2+2=4", True), ("2+2=5", False), ("7*8=56", True), ("71-9=61", False), ("123+456=5", False)]
    tok = verifier.tokenizer
    one, zero = (tok.encode(c, add_special_tokens=False)[0] for c in "10")
    lone = []
    for view, _ in test:
        ids = torch.tensor([verifier.render([{"role": "system", "content": "Verify."}, {"role": "user", "content": view}])])
        with torch.no_grad():
            probs = torch.softmax(verifier.model(input_ids=ids).logits[0, -1].float(), dim=-1)
        lone.append((float(probs[one]), float(probs[zero])))
    q = verifier_quality(verifier, test)
    wrong = [p for p, (_, right) in zip(lone, test) if not right]
    right = [p for p, (_, ok) in zip(lone, test) if ok]
    assert q["right_share"] == 0.4
    assert q["accepted_wrong_sampled"] == pytest.approx(sum(a for a, _ in wrong) / 3, abs=1e-4)
    assert q["rejected_right_sampled"] == pytest.approx(sum(r for _, r in right) / 2, abs=1e-4)
    assert q["accepted_wrong_greedy"] == pytest.approx(sum(a > r for a, r in wrong) / 3, abs=1e-4)
    with pytest.raises(ValueError, match="needs right and wrong answers"):
        verifier_quality(verifier, [("2+2=4", True)])


def test_a_tournament_takes_tiny_verifier_as_a_player() -> None:
    from cogym.runners.tournament.players import resolve_players

    (player, _) = resolve_players(["tiny-verifier", "scripted:random"])
    assert player.name == "tiny-verifier" and Policy.from_pretrained(player.path, device="cpu").name == "tiny-verifier"


def test_the_shipped_verifier_is_weak_but_checks() -> None:
    """On fresh answers of the tiny model it accepts right answers more often than wrong ones, and lets
    through a real share of the wrong ones: the opening a generator paid by it alone learns to use."""
    generator, verifier = Policy.from_pretrained("tiny", device="cpu"), Policy.from_pretrained("tiny-verifier", device="cpu")
    banned = {r["question"] for r in load_heldout()}
    test = _sampled_answers(generator, Domain(), np.random.default_rng(7), 400, banned)
    q = verifier_quality(verifier, test)
    accept_right = 1.0 - q["rejected_right_sampled"]
    assert accept_right > q["accepted_wrong_sampled"] + 0.1, q
    assert 0.15 < q["accepted_wrong_sampled"] < 0.6, q
    built = json.loads((embedded_model_path("tiny-verifier") / "build_info.json").read_text())
    assert built["base"] == "tiny" and built["after"]["valid_mass"] > 0.99


def test_cli_builds_the_verifier_to_out(tmp_path, capsys, monkeypatch) -> None:
    import cogym.runners.research.build_tiny_model as btm

    seen = {}

    def fake(out, **kw):
        seen.update(out=out, **kw)
        return {"after": {"accepted_wrong_sampled": 0.3, "rejected_right_sampled": 0.45}, "seconds": 1.0}

    monkeypatch.setattr(btm, "build_verifier", fake)
    # through the cogym command: its options reach build-tiny-model's own parser
    assert cli_main(["build-tiny-model", "--verifier", "--out", str(tmp_path / "v"), "--steps", "5"]) == 0
    assert seen == {"out": tmp_path / "v", "seed": 0, "steps": 5}
    assert "accepts 0.300 of the wrong ones, rejects 0.450 of the right ones" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        cli_main(["build-tiny-model", "--help"])
    assert exit_.value.code == 0 and "--verifier" in capsys.readouterr().out
    assert main(["--verifier", "--out", str(tmp_path / "w")]) == 0 and seen["steps"] == 400
    for wrong, says in ((["--steps", "5"], "an option of --verifier"),
                        (["--verifier", "--max-steps", "9"], "--max-steps: options of the tiny model's build"),
                        (["--verifier", "--steps", "0"], "--steps must be >= 1")):
        with pytest.raises(SystemExit) as exit_:
            main(wrong)
        assert exit_.value.code == 2 and says in capsys.readouterr().err
