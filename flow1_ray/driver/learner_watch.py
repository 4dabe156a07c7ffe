"""The driver side of the learner diagnostics: install the tracing on every Learner, judge
each iteration's curves, keep the ``learner/`` table, take snapshots, and act on a FAIL.

Runs inside ``Flow1Callbacks.on_algorithm_init`` / ``on_train_result`` (the Algorithm's
process). Every call that reaches a Learner actor has a timeout; every step is guarded by
the caller, so a failure here costs a diagnosis, never the run.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from typing import Any

from ..common import codes as C
from ..common import schema as S
from ..checks.learner.curve_diagnosis import CurveDiagnosis
from ..checks.curves import finite as _f
from ..checks.curves import result_section
from ..checks.thresholds import DEFAULT
from ..common.events import Event
from ..learner import tracer as T
from ..learner.layers import layer_order
from ..options import Flow1Options
from ..rundir.store import Location


logger = logging.getLogger("flow1_ray")

#: reinstall the tracing on remote Learners this often (a restarted actor comes back bare)
REINSTALL_EVERY = 10


@functools.lru_cache(maxsize=1)
def rule_columns() -> tuple[str, ...]:
    """Columns a rule's :class:`~flow1_ray.checks.rule.View` charts from the learner table
    beyond the base ones: RLlib's per-module learner stats by name (``vf_explained_var``), so a
    new rule's signal is recorded, and drawn, without touching this file."""
    from ..checks.catalogue import rules

    cols = [c for r in rules().values() if r.view is not None and r.view.table == S.LEARNER_DIR
            for c in r.view.columns if c not in S.LEARNER_COLUMNS]
    return tuple(dict.fromkeys(cols))


def learner_columns() -> tuple[str, ...]:
    return S.LEARNER_COLUMNS + rule_columns()
_FAIL_LINE = re.compile(r"\|\s*FAIL\s*\|\s*(\S+)")


class LearnerWatch:
    def __init__(self, algorithm: Any, opts: Flow1Options, run_id: str) -> None:
        self.opts = opts
        self.run_id = run_id
        self.th = DEFAULT.with_overrides(opts.thresholds)
        self.algorithm = algorithm
        self.status: dict = {}
        self.statuses: list[dict] = []          # one per Learner, from the last install
        self.off_said: set[str] = set()         # watchers already said to be off (once each)
        self.pending: list[Event] = []          # WATCHER_OFF found before the first send
        self.layers: dict[str, dict[str, int]] = {}   # module -> layer -> place in network order
        spaces = self.install()
        self.diagnosis = CurveDiagnosis(config=getattr(algorithm, "config", None), action_space=spaces or None,
                                        thresholds=self.th)
        self.snapshots = 0
        self.loss_best: dict[str, tuple[float, int]] = {}
        self.plateau_reported: set[str] = set()
        self.guard_done = False
        self.rolling: list[str] = []            # checkpoint_every: the checkpoints kept, oldest first
        self.live = None                        # with_options(whatif=True): the what-ifs beside the run
        if opts.whatif:
            from .live_whatif import LiveWhatif

            self.live = LiveWhatif(algorithm, opts, run_id)
        self.rolling_s = 0.0                    # ... and the driver's time spent saving them
        self.stop_reason: str | None = None

    # -- the tracing on the Learners -------------------------------------------------------
    def install(self) -> dict:
        """Install on every Learner (idempotent); returns {module_id: action_space}."""
        if not self.opts.learner_tracing:
            return self._spaces_only()
        group = getattr(self.algorithm, "learner_group", None)
        if group is None:
            return {}
        fn = functools.partial(_install_and_spaces, grad_every=self.opts.grad_every, tau=self.th.dormant_tau,
                               heartbeat_s=self.opts.heartbeat_interval_s, stall_s=self.opts.stall_timeout_s,
                               run_id=self.run_id, dump=self.opts.repro_max > 0)
        spaces: dict = {}
        self.statuses = []
        for r in _results(group.foreach_learner(fn, timeout_seconds=self.opts.get_timeout_s * 5)):
            self.status = r.get("status", {})
            self.statuses.append(self.status)
            spaces.update(r.get("spaces", {}))
            self.layers.update({m: {layer: i for i, layer in enumerate(ls)} for m, ls in r.get("layers", {}).items()})
        self.pending += self._watchers_off()
        return spaces

    def _watchers_off(self) -> list[Event]:
        """WATCHER_OFF, once each, for a Learner whose tracing turned itself off or whose
        lock file could not be made (its death or hang would go unnamed)."""
        from ..checks.own.watchers import LEARNER_LIVENESS, LEARNER_TRACING, watcher_off

        out = []
        for i, st in enumerate(self.statuses):
            who = f"learner {st.get('rank', i)}"
            if st.get("off_reason") and f"tracing:{who}" not in self.off_said:
                self.off_said.add(f"tracing:{who}")
                ev = watcher_off(LEARNER_TRACING, who, st["off_reason"], "its gradient and dormant-unit findings")
                ev.evidence["traceback"] = st.get("off_traceback") or ""
                out.append(ev)
            if st.get("liveness_error") and f"liveness:{who}" not in self.off_said:
                self.off_said.add(f"liveness:{who}")
                ev = watcher_off(LEARNER_LIVENESS, who, st["liveness_error"], "its death or hang")
                ev.evidence["traceback"] = st.get("liveness_traceback") or ""
                out.append(ev)
        return out

    def _spaces_only(self) -> dict:
        group = getattr(self.algorithm, "learner_group", None)
        if group is None:
            return {}
        out: dict = {}
        for r in _results(group.foreach_learner(_spaces, timeout_seconds=self.opts.get_timeout_s * 5)):
            out.update(r)
        return out

    # -- one iteration ---------------------------------------------------------------------
    def after_iteration(self, result: dict, iteration: int, send: Any) -> dict:
        """Judge, record, snapshot and guard; returns ``result["flow1"]["learner"]``.
        ``send(kind, payload)`` delivers to the run's Recorder (events and rows go with the
        hook's one call to the hub). The runners' FAILs are guarded in :meth:`after_lines`,
        once the hub has answered with its new log lines."""
        group = getattr(self.algorithm, "learner_group", None)
        tracing_off = (((result.get("learners") or {}).get(S.ALL_MODULES) or {}).get(S.RESULT_KEY) or {}).get("tracing_off")
        if self.opts.learner_tracing and group is not None and (
                (not group.is_local and iteration % REINSTALL_EVERY == 0)
                or (tracing_off and not any(k.startswith("tracing:") for k in self.off_said))):
            self.install()
        events = self.pending + self.diagnosis.add(result)
        self.pending = []
        rows = self._rows(result, iteration)
        if rows:
            send("learner_rows", rows)
        triggers = [f"{e.code.lower()}" for e in events if e.code == C.REWARD_DROP]
        triggers += self._plateaus(result, iteration)
        if triggers and self.snapshots < self.opts.snapshots_max:
            ev = self._snapshot(iteration, triggers[0], send)   # traces the next update too
            if ev is not None:
                events.append(ev)
        elif triggers and self.opts.learner_tracing and group is not None:
            group.foreach_learner(T.trace_next, timeout_seconds=self.opts.get_timeout_s)
        if events:
            send("events", [e.to_dict() for e in events])
        self._guard_fails([e.code for e in events if e.status == C.FAIL], iteration, send)
        ev = self._rolling(iteration)
        if ev is not None:
            send("events", [ev.to_dict()])
        if self.live is not None:
            try:
                ev = self.live.maybe_launch(events, iteration, self.rolling, send)
            except Exception as e:   # noqa: BLE001 -- a what-if that cannot start never stops training
                from ..checks.own.watchers import internal_event

                ev = internal_event("live what-if", e, iteration=iteration)
            if ev is not None:
                send("events", [ev.to_dict()])
        if self.stop_reason is not None:
            result["done"] = True
        values = self.diagnosis.values()
        if self.opts.checkpoint_every:
            values["checkpoints"] = {"kept": list(self.rolling), "seconds": round(self.rolling_s, 3)}
        values["tracing"] = {k: v for k, v in self.status.items() if k != "off_traceback"}
        values["snapshots"] = self.snapshots
        if self.stop_reason is not None:
            values["stopped_by"] = self.stop_reason
        return values

    def after_lines(self, result: dict, values: dict, iteration: int, new_lines: list[str], send: Any) -> None:
        """The guard for a FAIL in the hub's new log lines (a runner's, the monitor's):
        ``on_fail`` acts on the iteration that brought it, as on the learner's own."""
        self._guard_fails([m.group(1) for line in new_lines for m in [_FAIL_LINE.search(line)] if m],
                          iteration, send)
        if self.stop_reason is not None:
            result["done"] = True
            values["stopped_by"] = self.stop_reason

    def _guard_fails(self, fails: list[str], iteration: int, send: Any) -> None:
        if fails and self.opts.on_fail != "report" and not self.guard_done:
            ev = self._guard(fails[0], iteration)
            if ev is not None:
                send("events", [ev.to_dict()])

    def _rows(self, result: dict, iteration: int) -> list[dict]:
        rows = []
        learners = result_section(result, "learners")
        for mid, stats in learners.items():
            if mid == S.ALL_MODULES or not isinstance(stats, dict):
                continue
            base = {"iteration": iteration, "module_id": str(mid)}
            curves = self.diagnosis.last.get(mid, {})
            tr = stats.get(S.RESULT_KEY) or {}
            rows.append({**base, "layer": None, "kind": S.KIND_MODULE,
                         **{k: _f(stats.get(k)) for k in (S.ENTROPY, S.MEAN_KL, S.POLICY_LOSS, S.VF_LOSS,
                                                          S.TOTAL_LOSS, S.LEARNING_RATE)},
                         # a rule's column: RLlib's stat by that name, else the number flow1 derived
                         **{k: _f(stats.get(k)) if k in stats else _f(curves.get(k)) for k in rule_columns()},
                         S.ENTROPY_RATIO: _f(curves.get(S.ENTROPY_RATIO)),
                         **{k: _f(tr.get(k)) for k in (S.GRAD_NORM, S.VF_PI_TRUNK_RATIO, S.VF_PI_HEAD_RATIO)}})
            dormant = tr.get("dormant") or {}
            order = self.layers.get(str(mid), {})
            for layer, v in (tr.get(S.GRAD_RMS) or {}).items():
                rows.append({**base, "layer": layer, "kind": S.KIND_GRAD, S.GRAD_RMS: _f(v),
                             S.LAYER_INDEX: order.get(layer)})
            for layer, v in dormant.items():
                rows.append({**base, "layer": layer, "kind": S.KIND_ACTIVATION, S.DORMANT_SHARE: _f(v),
                             S.LAYER_INDEX: order.get(layer)})
        columns = learner_columns()
        return [{c: r.get(c) for c in columns} for r in rows]

    def _plateaus(self, result: dict, iteration: int) -> list[str]:
        """Snapshot when a module's total loss stops falling (no new low for
        ``loss_plateau_iters`` iterations); once per module until it falls again."""
        out = []
        for mid, stats in result_section(result, "learners").items():
            if mid == S.ALL_MODULES or not isinstance(stats, dict):
                continue
            loss = _f(stats.get("total_loss"))
            if loss is None:
                continue
            best = self.loss_best.get(mid)
            if best is None or loss < best[0]:
                self.loss_best[mid] = (loss, iteration)
                self.plateau_reported.discard(mid)
            elif iteration - best[1] >= self.opts.loss_plateau_iters and mid not in self.plateau_reported:
                self.plateau_reported.add(mid)
                out.append(f"loss_plateau-{mid}")
        return out

    def _snapshot(self, iteration: int, trigger: str, send: Any) -> Event | None:
        group = getattr(self.algorithm, "learner_group", None)
        if group is None or not self.opts.learner_tracing:
            return None
        fn = functools.partial(T.take_snapshot, max_rows=self.opts.snapshot_rows)
        got = _results(group.foreach_learner(fn, timeout_seconds=self.opts.get_timeout_s * 5))
        if not got or not got[0]:
            return None
        snap = {**got[0], "iteration": iteration, "trigger": trigger}
        name = f"iter_{iteration:06d}-{trigger}"
        path = send("learner_snapshot", (name, snap, self.opts.snapshots_max, int(self.opts.snapshot_max_mb * 2**20)))
        if not path:
            return None
        self.snapshots += 1
        cols = {m: sorted(c) for m, c in snap.get("modules", {}).items()}
        return Event(C.LEARNER_SNAPSHOT, (
            f"after {trigger.replace('_', ' ')} at iteration {iteration}: the latest train batch "
            f"({', '.join(f'{m}: {len(c)} columns' for m, c in cols.items()) or 'no batch'}) and the per-layer "
            f"gradient RMS saved to {path}"),
            {"path": path, "trigger": trigger, "columns": cols, "rows_max": self.opts.snapshot_rows},
            iteration=iteration)

    def stop(self) -> None:
        """The run stops: a live what-if still running is cancelled (it says so)."""
        if self.live is not None:
            self.live.stop()

    def _rolling(self, iteration: int) -> Event | None:
        """checkpoint_every: the run saved every N iterations to RUN_DIR/checkpoints/iter<N>,
        the newest ``checkpoints_kept`` kept, so that ``flow1 whatif`` can branch from before
        a symptom. In the driver, between train() calls: opt-in, its time in the result."""
        every = self.opts.checkpoint_every
        if every <= 0 or iteration % every:
            return None
        path = Location(self.opts.resolved_output_dir()) / self.run_id / S.CHECKPOINTS_DIR / f"iter{iteration:06d}"
        t0 = time.perf_counter()
        try:
            self.algorithm.save_to_path(str(path))
            self.rolling.append(str(path))
            while len(self.rolling) > self.opts.checkpoints_kept:
                _remove(Location(self.rolling.pop(0)))
        except Exception as e:   # noqa: BLE001 -- a checkpoint that cannot be written never stops training
            from ..checks.own.watchers import internal_event

            return internal_event("rolling checkpoint", e, iteration=iteration)
        finally:
            self.rolling_s += time.perf_counter() - t0
        return None

    def _guard(self, code: str, iteration: int) -> Event | None:
        """on_fail: a checkpoint beside the run directory and/or a clean stop (Tune stops a
        trial whose result says ``done``)."""
        self.guard_done = True
        action = self.opts.on_fail
        did, path = [], None
        if "checkpoint" in action:
            path = str(Location(self.opts.resolved_output_dir()) / f"{self.run_id}-checkpoint-iter{iteration:06d}")
            try:
                self.algorithm.save_to_path(path)
                did.append(f"saved a checkpoint to {path}")
            except Exception as e:
                did.append(f"could not save a checkpoint ({type(e).__name__}: {e})")
                path = None
        if "stop" in action:
            self.stop_reason = code
            did.append("stopped the run (result['done'] = True)")
        return Event(C.GUARD_ACTION, f"on_fail={action!r}: {code} at iteration {iteration}: " + "; ".join(did),
                     {"on_fail": action, "finding": code, "checkpoint": path, "stopped": "stop" in action},
                     iteration=iteration)


def _remove(loc: Location) -> None:
    if loc.local:
        import shutil

        shutil.rmtree(loc.path, ignore_errors=True)
    else:
        loc.fs.delete_dir(loc.path)


def _install_and_spaces(learner: Any, grad_every: int = 50, tau: float = 0.025, heartbeat_s: float = 1.0,
                        stall_s: float = 30.0, run_id: str | None = None, dump: bool = True) -> dict:
    """On one Learner: the tracing and the NaN guard, and (in a Learner actor) its lock-file liveness."""
    from ..liveness import learner as liveness
    from ..checks.own.watchers import error_line, traceback_text

    status = {**T.install(learner, grad_every, tau, run_id, _rank(), dump), "rank": _rank()}
    try:
        liveness.attach(learner, _rank(), heartbeat_s, stall_s)
    except Exception as e:  # liveness is flow1's; the Learner goes on without it (said: WATCHER_OFF)
        status = {**status, "liveness_error": error_line(e), "liveness_traceback": traceback_text(e)}
    try:
        layers = layer_order(learner)
    except Exception:   # the rows keep no index; the reports fall back to the layers' names
        layers = {}
    return {"status": status, "spaces": _spaces(learner), "layers": layers}


def _rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:
        return 0


def _spaces(learner: Any) -> dict:
    out = {}
    try:
        module = learner.module
        for mid in module.keys():
            space = getattr(module[mid], "action_space", None)
            if space is not None:
                out[str(mid)] = space
    except Exception:
        pass
    return out


def _results(res: Any) -> list:
    """The values of a foreach_learner call (RemoteCallResults or a list), errors dropped."""
    out = []
    try:
        for r in res:
            if hasattr(r, "ok"):
                if r.ok:
                    out.append(r.get())
            else:
                out.append(r)
    except Exception:
        pass
    return out
