"""Engine optimizer state survives save/load at every ZeRO stage: the next step equals an uninterrupted one."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("DS_ACCELERATOR", "cpu")

from cogym.learners.config import LearnerConfig
from cogym.learners.engines import DeepSpeedEngine, TorchEngine


def _step(engine, x):
    engine.backward(engine.train_module(x).pow(2).sum())
    engine.step()


def _weights(engine, model):
    with engine.gathered_params():
        return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    pytest.param(lambda m: TorchEngine(m, LearnerConfig.from_flat(engine="torch", lr=1e-2)), id="torch"),
    *[pytest.param(lambda m, s=s: DeepSpeedEngine(m, LearnerConfig.from_flat(zero_stage=s, lr=1e-2)), id=f"zero{s}")
      for s in range(4)],
])
def test_resume_continues_the_optimizer_exactly(make, tmp_path):
    torch.manual_seed(0)
    x = torch.randn(5, 4)
    model = torch.nn.Linear(4, 3)
    engine = make(model)
    _step(engine, x)
    engine.save(tmp_path)
    after_one = _weights(engine, model)
    _step(engine, x)
    straight = _weights(engine, model)

    model2 = torch.nn.Linear(4, 3)
    model2.load_state_dict(after_one)  # the trainer restores weights from the HF checkpoint
    engine2 = make(model2)
    engine2.load(tmp_path)
    _step(engine2, x)
    resumed = _weights(engine2, model2)
    for k in straight:
        assert torch.allclose(straight[k], resumed[k], atol=1e-6), k
    # Adam's second step differs from a first step: the state really was restored
    fresh = torch.nn.Linear(4, 3)
    fresh.load_state_dict(after_one)
    engine3 = make(fresh)
    _step(engine3, x)
    assert any(not torch.allclose(_weights(engine3, fresh)[k], straight[k], atol=1e-6) for k in straight)


class _Exploit:
    """A pickle that would run code on an unrestricted load."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/cogym_pickle_exploit_ran",))


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_optimizer_checkpoints_load_without_unrestricted_pickle(stage, tmp_path):
    from cogym.learners.engines import _zero_safe_globals

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    engine = DeepSpeedEngine(model, LearnerConfig.from_flat(zero_stage=stage, lr=1e-2))
    _step(engine, torch.randn(5, 4))
    engine.save(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == (["optimizer.pt"] if stage == 0 else ["zero_optimizer.rank0.pt"])  # no DeepSpeed pickle folder
    with torch.serialization.safe_globals(_zero_safe_globals()):
        torch.load(tmp_path / files[0], weights_only=True)  # tensors, containers and the allow-listed classes only
    # A checkpoint file replaced by a malicious pickle is refused, and its code never runs.
    marker = "/tmp/cogym_pickle_exploit_ran"
    if os.path.exists(marker):
        os.remove(marker)
    torch.save({"optimizer": _Exploit()}, tmp_path / files[0])
    with pytest.raises(Exception, match="Weights only load failed"):
        engine.load(tmp_path)
    assert not os.path.exists(marker)
