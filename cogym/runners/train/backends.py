"""``run.backend`` -> its :class:`~cogym.runners.train.execution.Execution`: ``local`` runs in this
process (and its ``--nproc`` ranks), ``ray`` on a Ray cluster. Ray's module is imported only here and
only for ``run.backend: ray``, since ray is an optional dependency (``pip install cogym[ray]``)."""

from __future__ import annotations

from cogym.runners.config.schema import Config
from cogym.runners.train.execution import Execution, InProcess


def execution_for(cfg: Config) -> Execution:
    """The execution ``cfg.run.backend`` names (nothing starts until its ``open``)."""
    if cfg.run.backend == "ray":
        from cogym.runners.ray.execution import RayExecution

        return RayExecution(cfg)
    return InProcess(cfg)
