"""What a what-if is asked, checked before any Ray starts: each failure is one line and exit 2,
not a baseline run for nothing and a failure 17-40 s later.

- the budget: ``--seeds``, ``--iterations``, ``--parallel`` within bounds (a billion seeds would
  be a billion specs in memory);
- each ``--set`` value: at most :data:`MAX_VALUE_CHARS` characters, finite numbers only, and
  within what the knob means (:data:`BOUNDS`: ``lr`` > 0, ``gamma`` in (0, 1], ...);
- the checkpoint: its config readable (within :data:`READ_CONFIG_S`), every knob a parameter
  of the config method it names (``PPOConfig.training`` has no ``lr2``), and its algorithm the
  run directory's (``run.json``'s ``algorithm``): a DQN checkpoint filed under a PPO run would
  file its verdicts there.
"""

from __future__ import annotations

import difflib
import inspect
import math
import threading
from typing import Any, Callable

from ..common.errors import Flow1InputError

MAX_SEEDS = 100
MAX_ITERATIONS = 10_000
MAX_PARALLEL = 256
#: a ``--set`` value's length: a model config of a few layers is ~100 characters
MAX_VALUE_CHARS = 1_000
#: reading the checkpoint's config (unpickling it: the user's classes may run code)
READ_CONFIG_S = 60.0


def _positive(v: float) -> bool:
    return v > 0


def _non_negative(v: float) -> bool:
    return v >= 0


def _unit(v: float) -> bool:
    return 0 <= v <= 1


def _unit_open(v: float) -> bool:
    return 0 < v <= 1


def _count(v: float) -> bool:
    return float(v).is_integer() and v >= 1


#: knobs whose meaning bounds their value: name -> (test, what is expected)
BOUNDS: dict[str, tuple[Callable[[float], bool], str]] = {
    "lr": (_positive, "> 0"), "actor_lr": (_positive, "> 0"), "critic_lr": (_positive, "> 0"),
    "alpha_lr": (_positive, "> 0"), "gamma": (_unit_open, "in (0, 1]"), "lambda_": (_unit, "in [0, 1]"),
    "tau": (_unit_open, "in (0, 1]"), "clip_param": (_positive, "> 0"), "vf_clip_param": (_positive, "> 0"),
    "grad_clip": (_positive, "> 0 (or None: no clipping)"), "entropy_coeff": (_non_negative, ">= 0"),
    "vf_loss_coeff": (_non_negative, ">= 0"), "kl_coeff": (_non_negative, ">= 0"), "kl_target": (_positive, "> 0"),
    "initial_alpha": (_positive, "> 0"), "num_epochs": (_count, "a whole number >= 1"),
    "minibatch_size": (_count, "a whole number >= 1"), "train_batch_size_per_learner": (_count, "a whole number >= 1"),
    "train_batch_size": (_count, "a whole number >= 1"), "n_step": (_count, "a whole number >= 1"),
    "target_network_update_freq": (_non_negative, ">= 0"),
}


def check_budget(iterations: int, seeds: int, parallel: int, cpus_per_branch: float, env_runners: int,
                 first_seed: int = 0) -> None:
    """The what-if's size, refused in one line when out of bounds."""
    for name, v, hi in (("--iterations", iterations, MAX_ITERATIONS), ("--seeds", seeds, MAX_SEEDS),
                        ("--parallel", parallel, MAX_PARALLEL)):
        if not 1 <= v <= hi:
            raise Flow1InputError(f"{name} must be in 1..{hi:,}, got {v}")
    if not (isinstance(cpus_per_branch, (int, float)) and math.isfinite(cpus_per_branch) and cpus_per_branch > 0):
        raise Flow1InputError(f"--cpus-per-branch must be a finite number > 0, got {cpus_per_branch}")
    if not 0 <= env_runners <= MAX_PARALLEL:
        raise Flow1InputError(f"--env-runners must be in 0..{MAX_PARALLEL}, got {env_runners}")
    if first_seed < 0 or first_seed + seeds > 2**31:
        raise Flow1InputError(f"--first-seed must be in 0..{2**31 - seeds:,}, got {first_seed}")


def _numbers(value: Any) -> list[float]:
    """The real numbers in a value (a schedule's pairs, a list of layer sizes), bools excluded."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _numbers(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    return []


def _schedule_values(value: Any) -> list[Any] | None:
    """A schedule ``[[timestep, value], ...]``'s values, else None."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return [p[1] for p in value]
    return None


def check_value(name: str, value: Any, where: str) -> None:
    """A knob's value: finite numbers, and within :data:`BOUNDS` for the knobs it lists."""
    for x in _numbers(value):
        if isinstance(x, float) and not math.isfinite(x):
            raise Flow1InputError(f"{where}: {name}={value!r} holds {x!r}; expected finite numbers")
    if name not in BOUNDS or (name == "grad_clip" and value is None):
        return
    test, expected = BOUNDS[name]
    values = _schedule_values(value) or [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Flow1InputError(f"{where}: {name} expects a number {expected}, actual {type(v).__name__} {v!r}")
        if not test(v):
            raise Flow1InputError(f"{where}: {name} expects a number {expected}, actual {v!r}")


def knob_names(config: Any, method: str) -> set[str] | None:
    """The keyword parameters of ``config.<method>`` over the config's classes (RLlib's
    ``PPOConfig.training`` takes its own and hands ``**kwargs`` to ``AlgorithmConfig.training``);
    None when the config has no such method."""
    if not callable(getattr(config, method, None)):
        return None
    names: set[str] = set()
    for cls in type(config).__mro__:
        fn = cls.__dict__.get(method)
        if fn is None:
            continue
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            continue
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"}
    return names


def check_knobs(config: Any, changes: list[tuple[str, str, str]]) -> None:
    """Each ``(method, knob, where)`` a parameter of the checkpoint config's method."""
    cls = type(config).__name__
    for method, knob, where in changes:
        names = knob_names(config, method)
        if names is None:
            raise Flow1InputError(f"{where}: {cls} has no method {method}()")
        if knob not in names:
            close = difflib.get_close_matches(knob, sorted(names), n=3)
            hint = f" (close: {', '.join(close)})" if close else ""
            raise Flow1InputError(f"{where}: {cls}.{method}() has no knob {knob!r}{hint}")


def read_config(checkpoint: str, load: Callable[[str], Any], timeout_s: float = READ_CONFIG_S) -> Any:
    """The checkpoint's AlgorithmConfig, read in a thread within ``timeout_s``; Flow1InputError
    with one line when it cannot be read (a corrupt pickle, a class that is gone) or hangs."""
    box: dict[str, Any] = {}

    def read() -> None:
        try:
            box["config"] = load(checkpoint)
        except BaseException as e:   # noqa: BLE001 -- whatever the unpickling raised is the user's input
            box["error"] = e

    t = threading.Thread(target=read, daemon=True, name="flow1-whatif-read-config")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise Flow1InputError(f"reading the checkpoint's config in {checkpoint} took over {timeout_s:g} s")
    if "error" in box:
        e = box["error"]
        raise Flow1InputError(f"cannot read the checkpoint's config in {checkpoint}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:200] if str(e) else ''}")
    return box["config"]


def algorithm_of(config: Any) -> str | None:
    """The Algorithm class name a config builds (``PPO``), or None."""
    algo = getattr(config, "algo_class", None)
    return getattr(algo, "__name__", None) if algo is not None else None


def check_algorithm(config: Any, run_algorithm: str | None, checkpoint: str, run_dir: str) -> None:
    """The checkpoint's algorithm is the run's (when the run recorded it)."""
    mine = algorithm_of(config)
    if run_algorithm and mine and mine != run_algorithm:
        raise Flow1InputError(f"the checkpoint {checkpoint} is a {mine}'s, the run {run_dir} trained {run_algorithm}: "
                              f"its verdicts would be filed under another algorithm's run (branch it from its own run)")


def check_source(checkpoint: str, run_dir: str | None, branches: list) -> Any:
    """Before Ray starts: the checkpoint's config read, every branch's knobs on it, its
    algorithm the run's. Returns the config."""
    from ..rundir.runrecord import RUN_JSON, read_json
    from .branch import load_config

    config = read_config(checkpoint, load_config)
    check_knobs(config, [(c.method, c.name, f"branch {b.name}") for b in branches for c in b.changes])
    if run_dir is not None:
        record, _ = read_json(run_dir, RUN_JSON)
        check_algorithm(config, (record or {}).get("algorithm"), checkpoint, run_dir)
    return config
