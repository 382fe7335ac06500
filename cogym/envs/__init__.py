"""cogym games: PettingZoo AEC environments whose seats are played by LLM agents.

``cogym.envs.make("proposer_solver-v0", num_solvers=4)`` builds a game; ``registered()`` lists
them; ``scripted_strategies(id)`` gives each role's scripted twins; ``checks.check_game`` holds a
game to cogym's contract.
"""

from cogym.envs.base import CogymEnv, GameSpec
from cogym.envs.errors import DatasetError
from cogym.envs.registry import Registration, make, register, registered, scripted_strategies

__all__ = ["CogymEnv", "DatasetError", "GameSpec", "Registration", "make", "register", "registered", "scripted_strategies"]
