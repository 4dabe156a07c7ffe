"""Checks of what lies between the env and the loss in RLlib's new stack, judged on what one
EnvRunner's pipeline did step by step (:class:`~.sample.PipeSample`): what the RLModule sees
(the env-to-module connectors' output against the env's observation), what it emits (its
action distribution's inputs) and what reaches the env (the module-to-env connectors' actions).
``flow1 check --config`` records them from a local EnvRunner built from the user's config
(:mod:`flow1_ray.pipeline`)."""
