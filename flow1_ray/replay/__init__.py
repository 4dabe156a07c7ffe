"""``flow1 replay RUN/repro/<entry>``: a flight-recorder dump played again on this machine.

The env is built as the worker built it (rundir/repro.py's manifest: a gymnasium id made with
the env_config, or the run's class or registered creator called with an RLlib-style env
context; ``--env module:Class`` where the run's creator cannot be named). It is reset as the
episode was: the env's random generator put back to its state before that reset, the same
options; then the recorded actions are stepped, each observation's digest compared with the
recorded one, and the action the run failed on is stepped last. The answer is one of:

- *reproduced*: the same exception (type and message) at the same step;
- *diverged*: an observation differs from the recorded one at step k before the failure: the
  env does not replay from its seed and actions (global randomness, the clock, outside state);
- *did not reproduce*: every step replayed, the last without the failure (or with another).

``play`` runs the replay in a child process: a step that does not return within
``step_timeout_s`` is a hang, reported with the child's stacks (faulthandler), whether the run
hung there or not; with ``pdb`` the child replays up to the failing step and stops pdb in that
call. ``load(entry, steps_before=N)`` replays in this process up to N steps before the failing
one and returns the env there (a notebook), :func:`failing_action` the action it failed on.

A Learner's NaN dump (``kind: learner``) is played by :mod:`.learner`: the update run again
on the CPU, naming the layer or operation that made the NaN/inf.
"""

from importlib import import_module

#: the public names, imported on first use (``flow1_ray.replay.load(entry)`` in a notebook): a
#: lazy facade, so that env.py, play.py and learner.py import each other without this package
_LAZY = {"DIVERGED": "env", "HUNG": "env", "NOT_REPRODUCED": "env", "REPRODUCED": "env", "STEP_TIMEOUT_S": "env",
         "build_env": "env", "failing_action": "env", "load": "env", "steps": "env", "play": "play",
         "replay_update": "learner"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'flow1_ray.replay' has no attribute {name!r}")
