"""Imports the shipped algorithms, which register themselves (in this order)."""

from cogym.learners.algorithms import grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, ppo, rae, trr_pp, prime, spin  # noqa: F401
