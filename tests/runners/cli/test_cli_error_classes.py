"""Every error a user causes prints as one line at the CLI, whatever its class: the config's own
(ConfigError) and the others, each named after what it is about (a run directory, a seating, a
command line, a claim, ratings, an endpoint's key, Ray, weight sync, a strict run)."""

import pytest

from cogym.agents.endpoint import MissingKeyError
from cogym.agents.flat_weights import WeightSyncError
from cogym.core.errors import CogymError, ConfigError
from cogym.envs.evaluation import EvaluatorError
from cogym.runners import cli
from cogym.runners.cli import main
from cogym.runners.cli.args import UsageError
from cogym.runners.research.reproduce import all_claims, ClaimError
from cogym.runners.results.leaderboard import RatingError
from cogym.runners.rollout.seating import SeatingError
from cogym.runners.rundir import RunDirError
from cogym.runners.train.checkpoint import check_resume_world
from cogym.runners.train.idle import IdleError

ERRORS = [ConfigError, RunDirError, SeatingError, UsageError, ClaimError, RatingError, MissingKeyError,
          WeightSyncError, IdleError, EvaluatorError]


def _one_line(capsys, rc: int, command: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"cogym {command}: error: ")
    return err.removeprefix(f"cogym {command}: error: ").strip()


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: e.__name__)
def test_every_error_class_is_a_one_line_error(error, monkeypatch, capsys) -> None:
    assert issubclass(error, cli.USER_ERRORS) and issubclass(error, (CogymError, FileNotFoundError))

    def run(args):
        raise error(f"something {error.__name__} names")

    monkeypatch.setattr("cogym.runners.cli.show.run", run)
    assert _one_line(capsys, main(["show", "anywhere"]), "show") == f"something {error.__name__} names"


def test_an_out_directory_that_is_a_file_is_one_line(tmp_path, capsys) -> None:
    out = tmp_path / "taken"
    out.write_text("a file\n")
    claim = all_claims()[0].name
    line = _one_line(capsys, main(["reproduce", claim, "--out", str(out)]), "reproduce")
    assert line == f"--out {str(out)!r} is a file; name a new directory"


def test_a_checkpoint_written_by_another_process_count_is_one_line(tmp_path, capsys) -> None:
    ckpt = tmp_path / "run" / "checkpoints" / "step_000002"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text('{"iteration": 2, "world_size": 2}')
    with pytest.raises(RunDirError, match="was written by 2 process") as err:
        check_resume_world(ckpt, 1)
    assert "\n" not in str(err.value)


def test_a_missing_claim_is_a_usage_error(capsys) -> None:
    assert _one_line(capsys, main(["reproduce"]), "reproduce") == "name a claim (cogym reproduce --list shows them)"
    assert "did you mean" in _one_line(capsys, main(["reproduce", all_claims()[0].name + "x"]), "reproduce")


def test_a_ray_error_is_one_line_too(monkeypatch, capsys) -> None:
    pytest.importorskip("ray", reason="needs the ray extra: pip install 'cogym[ray]'")
    from cogym.runners.ray.pool import RayError  # imports ray itself: only where it is installed

    test_every_error_class_is_a_one_line_error(RayError, monkeypatch, capsys)
