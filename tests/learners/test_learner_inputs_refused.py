"""Inputs the new learners must refuse in one line, not ignore or crash on: a policy-loss knob set for a
loss the learner does not use, OTB under ZeRO-3, and hostile rows in a JSONL data file (dpo_data, sft_data)."""

from __future__ import annotations

import json

import pytest

from cogym.learners.config import LearnerConfig
from cogym.learners.preference import read_jsonl


@pytest.mark.parametrize("key, value, owner", [("clip_cov_ratio", 0.5, "clip_cov"), ("kl_cov_coef", 0.2, "kl_cov"),
                                               ("sapo_tau_pos", 3.0, "sapo")])
def test_a_knob_of_another_policy_loss_is_refused_not_ignored(key, value, owner) -> None:
    with pytest.raises(ValueError, match=f"{key} is a knob of policy_loss: {owner}, but policy_loss is 'vanilla'"):
        LearnerConfig.from_flat(algorithm="grpo", engine="torch", **{key: value})
    assert getattr(LearnerConfig.from_flat(algorithm="grpo", engine="torch", policy_loss=owner, **{key: value}), key) == value


def test_otb_refuses_zero_3() -> None:
    with pytest.raises(ValueError, match="otb takes its token statistics .* use zero_stage 0 to 2"):
        LearnerConfig.from_flat(algorithm="otb", engine="deepspeed", zero_stage=3).validate()
    LearnerConfig.from_flat(algorithm="otb", engine="deepspeed", zero_stage=2).validate()


def test_a_row_holding_a_line_separator_inside_a_string_is_read(tmp_path) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [{"prompt": "a\u2028b", "response": "c\x85d"}, {"prompt": "e", "response": "f"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8")
    read = list(read_jsonl(str(path), "sft_data"))
    assert [obj for _, obj in read] == rows and read[1][0].endswith("line 2")


@pytest.mark.parametrize("bad", ["[" * 100_000 + "]" * 100_000, "{\"n\": " + "9" * 5000 + "}"])
def test_a_hostile_row_is_a_one_line_error_naming_the_line(tmp_path, bad) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a", "response": "b"}\n' + bad + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"sft_data '.*rows.jsonl' line 2: not a readable JSON row") as info:
        list(read_jsonl(str(path), "sft_data"))
    assert "\n" not in str(info.value) and len(str(info.value)) < 300
