"""cogym: LLM co-training setups as multi-agent games.

The package's layers, lowest first (docs/architecture.md draws them): ``cogym.core`` (the game
protocol, seeding, the sandbox), ``cogym.envs`` (games), ``cogym.agents`` (seats and generation
backends), ``cogym.learners`` (algorithms and engines), ``cogym.runners`` (rollouts, training,
tournaments, the ``cogym`` command). Importing ``cogym`` loads nothing else.
"""
