"""Training: the loop and its parts.

``build`` turns a config into games, policies and learners; ``loop`` runs iterations;
``iteration`` plays one iteration's games (dynamic sampling, data-parallel shards); ``hooks``,
``league``, ``checkpoint``, ``sinks``, ``metrics`` are its parts; ``launch`` starts ``--nproc`` runs.

    from cogym.runners.train import train
    summary = train(load_config("configs/kuhn_poker.yaml", ["run.iterations=5"]))"""

from cogym.core.lazy import lazy_exports

__all__ = ["Run", "train"]
__getattr__, __dir__ = lazy_exports(__name__, {"train": "loop", "Run": "build"}, __all__)
