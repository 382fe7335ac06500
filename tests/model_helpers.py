"""Helpers the model-facing tests share."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch


def full_logp(policy, prompt: list[int], ids: list[int], temperature: float) -> list[float]:
    """Log-probs of ``ids`` after ``prompt`` from one full forward (no cache), at ``temperature``."""
    with torch.no_grad():
        logits = policy.model(torch.tensor([prompt + ids])).logits[0].float() / temperature  # (T, V)
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(ids)]


def hub_cache(root: Path, repo_id: str, model_dir: Path) -> Path:
    """A Hugging Face hub-layout cache under ``root`` holding ``model_dir`` as ``repo_id``'s main snapshot;
    returns the snapshot directory."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / ("0123456789abcdef" * 3)[:40]
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(snapshot.name)
    return snapshot
