"""One branch of a what-if: the run's own config with some knobs changed, restored from a
checkpoint, its knobs read back from the built Learner, trained a few iterations.

Runs inside a Ray task (:func:`run_branch`), so that branches spread over a cluster and
several run at once; everything it returns is plain data.

Why the read-back: restoring a Learner's state restores its optimizers' ``param_groups``,
lr included, so a branch asked to run at lr 0.0097 from a checkpoint taken at lr 0.05 trains
its whole first iteration at 0.05 (measured: KL 3.4 in that iteration against 0.012 with
0.0097 in effect), and RLlib's lr
scheduler sets the configured value back only after it -- the result then reports 0.0097
(ray-project/ray#62173 is the same trap under PBT). A branch whose knob is not in effect
would make "the advice did not help" out of "the advice was never applied": each knob is read
from the Learner after the restore, re-applied where the restore overwrote it, read again,
and a branch whose knob still differs is left out of the verdict.
"""

from __future__ import annotations

import ast
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..checks.advice import Knob

#: the learner's result names a branch keeps per iteration and module
STATS = ("mean_kl_loss", "entropy", "policy_loss", "vf_loss", "vf_explained_var", "curr_kl_coeff",
         "curr_entropy_coeff", "default_optimizer_learning_rate", "total_loss", "qf_loss", "qf_mean",
         "td_error_mean")
_LINE = re.compile(r"^config\.(\w+)\(")


def change(knob: str, value: Any, method: str = "training") -> Knob:
    """A branch's change, ``config.<method>(<knob>=<value>)``: an advice's :class:`Knob`
    with no current value or reason (what ``--set`` gives)."""
    return Knob(knob, None, value, "", method)


@dataclass(frozen=True)
class BranchSpec:
    """What one task runs: ``changes`` on the checkpoint's config, ``seed``, ``iterations``."""

    branch: str
    checkpoint: str
    changes: tuple[Knob, ...]
    seed: int
    iterations: int
    env_runners: int = 0
    modules: tuple[str, ...] = ()


@dataclass
class BranchResult:
    branch: str
    seed: int
    readback: list[dict] = field(default_factory=list)
    in_effect: bool = True
    curves: list[dict] = field(default_factory=list)     # one row per iteration and module
    findings: list[dict] = field(default_factory=list)   # the curve rules' WARN/FAIL on this branch
    error: str | None = None
    seconds: float = 0.0
    build_s: float = 0.0
    node: str = ""


def parse_value(text: str) -> Any:
    """A ``--set`` value: a Python literal (0.01, [64, 64], True, "x"), else the string (a
    literal too deep or too large for the parser is refused in one line)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    except (MemoryError, RecursionError):
        from ..common.errors import Flow1InputError

        raise Flow1InputError(f"--set value {text[:40]!r}...: nested too deep to read") from None


def change_from_knob(knob: Mapping) -> Knob | None:
    """A finding's advised knob (``Knob.as_dict()``) as a branch's change; None when its value is not
    something a config method takes (a ``DefaultModelConfig(...)`` is rebuilt from its text)."""
    name, value = knob.get("knob"), knob.get("value")
    m = _LINE.match(str(knob.get("line") or ""))
    method = str(knob.get("method") or (m.group(1) if m else "training"))
    if not isinstance(name, str) or not name.isidentifier() or not method.isidentifier():
        return None
    if isinstance(value, str) and value.startswith("DefaultModelConfig("):
        value = _model_config_kwargs(value)
        if value is None:
            return None
    return change(name, value, method)


def _model_config_kwargs(text: str) -> dict | None:
    """``DefaultModelConfig(fcnet_hiddens=[64, 64])`` -> ``{"fcnet_hiddens": [64, 64]}``
    (literals only: nothing is evaluated)."""
    try:
        call = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(call, ast.Call) or call.args:
        return None
    try:
        return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    except ValueError:
        return None


def load_config(checkpoint: str) -> Any:
    """The run's ``AlgorithmConfig`` from a checkpoint written by ``save_to_path`` (its
    ``class_and_ctor_args.pkl``: the config's state, pickled by RLlib)."""
    import pickle

    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    with open(Path(checkpoint) / "class_and_ctor_args.pkl", "rb") as f:
        info = pickle.load(f)
    state = info["ctor_args_and_kwargs"][0][0]
    return AlgorithmConfig.from_state(state)


def branch_config(config: Any, changes: tuple[Knob, ...], seed: int, env_runners: int) -> Any:
    """A copy of the run's config: no callbacks (a branch is judged on its results),
    ``env_runners`` runners (0: it samples in its own process), its Learner in its own
    process (APPO's and IMPALA's default Learner actor would need a CPU the quota did not
    give), no evaluation, quiet logs; then the branch's changes (they win over those), then
    its seed."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    c = config.copy(copy_frozen=False)
    c.callbacks_class = RLlibCallback
    c.callbacks_on_environment_created = None
    c = (c.env_runners(num_env_runners=env_runners).learners(num_learners=0)
         .debugging(log_level="ERROR").evaluation(evaluation_interval=None))
    for ch in changes:
        if ch.method == "rl_module" and ch.name == "model_config" and isinstance(ch.value, dict):
            model = dict(c.model_config or {})
            model.update(ch.value)
            c = c.rl_module(model_config=model)
        else:
            c = getattr(c, ch.method)(**{ch.name: ch.value})
    return c.debugging(seed=seed)


def restore(algo: Any, checkpoint: str) -> None:
    """The whole checkpoint: the Learner (weights and optimizer state: Adam's moments go on
    as in the run), the EnvRunner's connectors (an observation filter's running mean), the
    algorithm's counters (schedules resume at the checkpoint's timestep); then the runners
    get the restored weights before the branch's first sample. The branch's config is its
    own: RLlib restores state, not settings, except what lives in that state (the
    optimizers' lr: :func:`read_back`)."""
    algo.restore_from_path(checkpoint)
    algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True)


def on_learners(algo: Any, fn: Any) -> list:
    """``fn(learner)`` on every Learner (local or remote), the values."""
    out = []
    for r in algo.learner_group.foreach_learner(fn):
        out.append(r.get() if hasattr(r, "get") and callable(r.get) and not isinstance(r, (dict, list)) else r)
    return out


def _first(v: Any) -> Any:
    """A schedule's first value (what is in effect at its start); else the value."""
    if isinstance(v, (list, tuple)) and v and isinstance(v[0], (list, tuple)) and len(v[0]) == 2:
        return v[0][1]
    return v


#: a knob that is an optimizer's learning rate: the optimizers (by the name RLlib registers
#: them under, ``None``: all of the module's) whose ``param_groups`` hold it -- a restore
#: overwrites each of them with the checkpoint's value
LR_KNOBS: dict[str, tuple[str, ...] | None] = {
    "lr": None, "critic_lr": ("qf", "qf_twin"), "actor_lr": ("policy",), "alpha_lr": ("alpha",)}


def _optimizers(learner: Any, knob: str, module_id: str) -> list:
    names = LR_KNOBS[knob]
    return [opt for name, opt in learner.get_optimizers_for_module(module_id) if names is None or name in names]


def effective(learner: Any, knob: str, module_id: str) -> Any:
    """The value the built Learner uses for ``knob``: its optimizers' lr (SAC's per-network
    rates too), PPO's current entropy and KL coefficients, else the per-module config it
    reads. Optimizers that disagree give a list."""
    if knob in LR_KNOBS:
        rates = sorted({float(opt.param_groups[0]["lr"]) for opt in _optimizers(learner, knob, module_id)})
        return rates[0] if len(rates) == 1 else (rates or None)
    if knob == "entropy_coeff" and hasattr(learner, "entropy_coeff_schedulers_per_module"):
        return float(learner.entropy_coeff_schedulers_per_module[module_id].get_current_value())
    if knob == "kl_coeff" and hasattr(learner, "curr_kl_coeffs_per_module"):
        return float(learner.curr_kl_coeffs_per_module[module_id])
    if knob == "model_config":
        return dict(learner.module[module_id].model_config or {})
    return getattr(learner.config.get_config_for_module(module_id), knob, None)


def _reapply(learner: Any, knob: str, value: Any, module_id: str) -> bool:
    """Set a knob the restore overwrote back to the branch's value (the optimizers' lr)."""
    if knob in LR_KNOBS:
        for opt in _optimizers(learner, knob, module_id):
            learner._set_optimizer_lr(opt, float(_first(value)))
        return True
    return False


def _same(asked: Any, got: Any) -> bool:
    asked = _first(asked)
    if isinstance(asked, dict) and isinstance(got, dict):
        return all(_same(v, got.get(k)) for k, v in asked.items())
    if isinstance(asked, (int, float)) and isinstance(got, (int, float)) and not isinstance(asked, bool):
        return math.isclose(float(asked), float(got), rel_tol=1e-6, abs_tol=1e-12)
    if isinstance(asked, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(asked) == len(got) and all(_same(a, b) for a, b in zip(asked, got))
    return asked == got


def read_back(algo: Any, changes: tuple[Knob, ...], modules: tuple[str, ...]) -> tuple[list[dict], bool]:
    """Each change, in each module, as the Learner holds it after the restore: asked,
    effective, and what was done (re-applied where the restore overwrote it)."""
    rows: list[dict] = []

    def look(learner: Any) -> list[dict]:
        out = []
        for ch in changes:
            for mid in modules:
                got = effective(learner, ch.name, mid)
                row = {"knob": ch.name, "module_id": mid, "asked": _first(ch.value), "after_restore": got,
                       "effective": got, "status": "in effect"}
                if not _same(ch.value, got):
                    fixed = _reapply(learner, ch.name, ch.value, mid)
                    row["effective"] = effective(learner, ch.name, mid) if fixed else got
                    row["status"] = ("overwritten by the restore, re-applied" if fixed and _same(ch.value, row["effective"])
                                     else "not in effect")
                out.append(row)
        return out

    for got in on_learners(algo, look):
        rows.extend(got)
    return rows, all(r["status"] != "not in effect" for r in rows)


def _curve_rows(result: Mapping, modules: tuple[str, ...], branch: str, seed: int, it: int) -> list[dict]:
    runners = result.get("env_runners") or {}
    ret = runners.get("episode_return_mean")
    learners = result.get("learners") or {}
    rows = []
    for mid in modules:
        stats = learners.get(mid) or {}
        row = {"branch": branch, "seed": seed, "iteration": it, "module_id": mid,
               "episode_return_mean": _num(ret), "env_steps": _num(result.get("num_env_steps_sampled_lifetime"))}
        for k in STATS:
            row[k] = _num(stats.get(k))
        rows.append(row)
    return rows


def _num(v: Any) -> float | None:
    """A result's number, NaN and infinities kept (a KL gone NaN is a finding, not a gap);
    None when absent or not a number."""
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _judges(algo: Any, modules: tuple[str, ...]) -> tuple[Any, dict]:
    """The run's curve rules for this branch, and per module the entropy's maximum (as the
    rules normalise it), from the built modules' action spaces."""
    from ..checks.learner.curve_diagnosis import CurveDiagnosis
    from ..checks.learner.learner_curves import ModuleCurves

    spaces = {}
    for mid in modules:
        try:
            spaces[mid] = getattr(algo.get_module(mid), "action_space", None)
        except Exception:   # noqa: BLE001 -- an unknown space leaves the ratio None
            spaces[mid] = None
    diagnosis = CurveDiagnosis(config=algo.config, action_space=spaces)
    return diagnosis, {mid: ModuleCurves(mid, knobs=diagnosis.knobs, action_space=sp) for mid, sp in spaces.items()}


def run_branch(spec: BranchSpec) -> BranchResult:
    """Build, restore, read back, train ``spec.iterations`` iterations; never raises (an
    error is returned, named)."""
    import ray

    out = BranchResult(spec.branch, spec.seed)
    t0 = time.perf_counter()
    try:
        out.node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:   # noqa: BLE001 -- where it ran is a courtesy
        out.node = ""
    algo = None
    try:
        import torch

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1") or 1)))
        config = branch_config(load_config(spec.checkpoint), spec.changes, spec.seed, spec.env_runners)
        algo = config.build_algo()
        restore(algo, spec.checkpoint)
        modules = spec.modules or tuple(sorted(on_learners(algo, lambda lr: list(lr.module.keys()))[0]))
        out.readback, out.in_effect = read_back(algo, spec.changes, modules)
        out.build_s = time.perf_counter() - t0
        diagnosis, ratio = _judges(algo, modules)
        for i in range(1, spec.iterations + 1):
            r = algo.train()
            rows = _curve_rows(r, modules, spec.branch, spec.seed, i)
            for row in rows:
                h, judge = row["entropy"], ratio.get(row["module_id"])
                row["entropy_ratio"] = (h if h is None or not math.isfinite(h) else   # NaN stays NaN: the worst
                                        judge.entropy_ratio(h) if judge is not None else None)
            out.curves.extend(rows)
            out.findings.extend({"iteration": i, "code": e.code, "status": e.status,
                                 "module_id": (e.evidence or {}).get("module_id"), "message": e.message}
                                for e in diagnosis.add(r) if e.status in ("WARN", "FAIL"))
    except Exception as e:   # noqa: BLE001 -- a branch that fails is named, the others go on
        out.error = f"{type(e).__name__}: {e}".splitlines()[0][:500]
    finally:
        if algo is not None:
            try:
                algo.stop()
            except Exception:   # noqa: BLE001
                pass
        out.seconds = time.perf_counter() - t0
    return out
