"""cogym learners: advantage estimators and losses (pure functions), the Learner, its engines
(DeepSpeed, torch) and the algorithms as plug-ins (:mod:`cogym.learners.algorithms`; importing this
package registers the shipped ones)."""

import cogym.learners.algorithms  # noqa: F401  (registers the shipped algorithms)
