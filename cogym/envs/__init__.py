"""cogym games: PettingZoo AEC environments whose seats are played by LLM agents.

``cogym.envs.make("proposer_solver-v0", num_solvers=4)`` builds a game; ``registered()`` lists
them; ``scripted_strategies(id)`` gives each role's scripted twins; ``checks.check_game`` holds a
game to cogym's contract.
"""

from cogym.envs import debate as _debate
from cogym.envs import generator_verifier as _generator_verifier
from cogym.envs import interruptible_verifier as _interruptible_verifier
from cogym.envs import kuhn_poker as _kuhn
from cogym.envs import proposer_solver as _proposer_solver
from cogym.envs import proposer_solver_judge as _proposer_solver_judge
from cogym.envs import search_qa as _search_qa
from cogym.envs import search_self_play as _search_self_play
from cogym.envs.base import CogymEnv, GameSpec
from cogym.envs.errors import DatasetError
from cogym.envs.registry import Registration, make, register, registered, scripted_strategies

# The evaluator kinds the games declare (GameSpec.evaluators), registered on import (cogym.envs.evaluation).
from cogym.envs import arithmetic_eval as _arithmetic_eval  # noqa: E402,F401  heldout_arithmetic
from cogym.envs import kuhn_poker_eval as _kuhn_poker_eval  # noqa: E402,F401  kuhn_exploitability
from cogym.envs import proposer_solver_eval as _proposer_solver_eval  # noqa: E402,F401  proposal_difficulty

__all__ = ["CogymEnv", "DatasetError", "GameSpec", "Registration", "make", "register", "registered", "scripted_strategies"]

register(_proposer_solver.GAME_ID, _proposer_solver.ProposerSolverEnv, scripted=_proposer_solver.SCRIPTED)
register(_generator_verifier.GAME_ID, _generator_verifier.GeneratorVerifierEnv, scripted=_generator_verifier.SCRIPTED)
register(_proposer_solver_judge.GAME_ID, _proposer_solver_judge.ProposerSolverJudgeEnv, scripted=_proposer_solver_judge.SCRIPTED)
register(_kuhn.GAME_ID, _kuhn.KuhnPokerEnv, scripted=_kuhn.SCRIPTED)
register(_debate.GAME_ID, _debate.DebateEnv, scripted=_debate.SCRIPTED)
register(_interruptible_verifier.GAME_ID, _interruptible_verifier.InterruptibleVerifierEnv, scripted=_interruptible_verifier.SCRIPTED)
register(_search_qa.GAME_ID, _search_qa.SearchQAEnv, scripted=_search_qa.SCRIPTED)
register(_search_self_play.GAME_ID, _search_self_play.SearchSelfPlayEnv, scripted=_search_self_play.SCRIPTED)
