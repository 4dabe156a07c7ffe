"""flow1_ray: why an RLlib run trains but does not learn, and which workers died or hung.

``check_env`` judges an env's contracts on every step of a rollout without training;
``Flow1Callbacks`` watches a live RLlib run, its EnvRunners and its Learners;
``diagnose_curves`` reads a run's learner curves from its result dicts (live or a finished
run's result.json); ``load_events`` reads a run directory's findings back as an Arrow table
(``read_table`` too, naming the parts it could not read instead of raising). Names are
imported on first use, so that a process that needs one part (a node probe, ``flow1
report``) does not pay for the others.
"""

from importlib import import_module

__version__ = "0.1.0"

_LAZY = {
    "check_env": "envcheck.api",
    "Flow1Callbacks": "callbacks",
    "Flow1InputError": "common.errors",
    "Event": "common.events",
    "EVENT_SCHEMA": "common.events",
    "Report": "report.model",
    "Thresholds": "checks.thresholds",
    "load_events": "rundir.reading",
    "load_metrics": "rundir.reading",
    "load_clusters": "rundir.reading",
    "load_learner": "rundir.reading",
    "read_table": "rundir.reading",
    "diagnose_curves": "checks.learner.curve_diagnosis",
    "analyze_state_actions": "clustering.state_action_map",
    "StateActionMap": "clustering.state_action_map",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'flow1_ray' has no attribute {name!r}")
