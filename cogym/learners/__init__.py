"""cogym learners: advantage estimators and losses (pure functions), the Learner, its engines
(DeepSpeed, torch) and the algorithms as plug-ins (:mod:`cogym.learners.algorithms`; the registry,
:mod:`cogym.learners.registry`, registers the shipped ones on its first lookup)."""
