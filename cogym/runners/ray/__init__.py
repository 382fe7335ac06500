"""Ray execution: rollout workers as actors holding generation backends, weights moved by version.

Everything here needs the ``ray`` extra (``pip install cogym[ray]``)."""
