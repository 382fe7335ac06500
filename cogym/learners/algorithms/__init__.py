"""Algorithms as plug-ins: each module of this package is one algorithm (its config, advantages and
state), registered by name in :data:`cogym.learners.registry.BUILTIN`. A user's algorithm is a module
like them that registers itself with ``@register``, listed in ``game.modules``::

    from dataclasses import dataclass
    from cogym.learners.algorithms import Algorithm, AlgorithmConfig, Advantages, register

    @dataclass
    class MyConfig(AlgorithmConfig):
        my_scale: float = 1.0

    @register("my_algo")
    class MyAlgo(Algorithm):
        Config = MyConfig
        grouped = True
        def advantages(self, rows):
            ...

See docs/write_your_own_algorithm.md.
"""

from cogym.learners.algorithm import Algorithm, AlgorithmConfig, Context, Discounted, Whitened, check_choice, check_number
from cogym.learners.rows import Advantages, MicroStep, RoleRows, TrainBatch
from cogym.learners.registry import FROZEN, get, names, register, unregister

__all__ = ["Advantages", "Algorithm", "AlgorithmConfig", "Context", "Discounted", "FROZEN", "MicroStep", "RoleRows",
           "TrainBatch", "Whitened", "check_choice", "check_number", "get", "names", "register", "unregister"]
