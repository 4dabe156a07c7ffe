"""Learner tracing: per-layer gradients, dormant units and the value/policy split of a shared
trunk, measured inside RLlib's Learner without changing the user's algorithm.

RLlib 2.60 has no callback on the Learner. ``install`` (run on every Learner through
``learner_group.foreach_learner`` from ``on_algorithm_init``: in the driver with
``num_learners=0``, in each learner actor otherwise) wraps the instance's
``compute_gradients`` -- the one call every torch Learner (PPO, APPO, IMPALA, DQN, SAC)
makes once per update with the gradients in hand -- and ``compute_losses`` (to keep a
reference to the latest train batch for snapshots). Every ``grad_every`` updates one update
is *traced*: forward hooks, installed just before it and removed right after, record each
activation layer's mean |activation| per unit and alias the inputs of the policy and value
heads so that each head's gradient into the shared embedding is seen on its own, and hook each
parameter layer's output to see whether the loss's gradient reaches it at all ("reach": 1 a
non-zero gradient arrived, 0 only zeros arrived -- a clamp or a ``* 0`` between the layer and
the loss --, -1 none arrived: the loss does not use the output), and count the update's
probability ratios outside ``1 +- clip_param`` (PPO's clip fraction); then each layer's
gradient RMS is computed in one stacked reduction. The numbers go through the
Learner's own MetricsLogger (``result["learners"][module]["flow1"]``), so no extra RPC.
Untraced updates pay one counter increment. Any error turns tracing off for that Learner;
it never reaches RLlib.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any

from ..common.schema import ALL_MODULES
from .batch_measures import batch_columns, clip_counts, reward_range
from .hooks import ForwardHooks
from .layers import _layer_of, modules_of
from .nan_guard import NonfiniteGuard
from ..checks.own.watchers import error_line, traceback_text

logger = logging.getLogger("flow1_ray")

ATTR = "_flow1_tracer"
SNAPSHOT_COLUMNS = ("obs", "actions", "rewards", "advantages", "value_targets", "terminateds", "truncateds")


class LearnerTracer(ForwardHooks):
    """The tracing state of one Learner."""

    def __init__(self, learner: Any, grad_every: int = 50, dormant_tau: float = 0.025, run_id: str | None = None,
                 rank: int = 0, dump: bool = True) -> None:
        self.learner = learner
        self.guard: NonfiniteGuard | None = NonfiniteGuard(learner, run_id, rank, dump)
        self.guard_off: str | None = None
        self.grad_every = max(1, int(grad_every))
        self.tau = float(dormant_tau)
        self.calls = 0
        self.traces = 0
        self.errors = 0
        self.off_reason: str | None = None      # why tracing turned itself off (one line)
        self.off_traceback: str | None = None
        self.spent_s = 0.0   # the tracing's own time: hooks, reductions, logging (its cost, measured)
        self._logged_s = 0.0   # ... of which already logged to the learner's metrics
        self.enabled = True
        self.lock = threading.Lock()
        self.names: dict[int, tuple[str, str]] = {}   # id(param) -> (module_id, layer)
        self.foreign: set[int] = set()   # optimizer params outside the modules (SAC's log-alpha)
        self.hooks: list = []
        self.acts: dict[tuple[str, str], list] = {}    # (module, layer) -> [sum |h| per unit, rows]
        self.head_grads: dict[tuple[str, str], float] = {}
        self.reach: dict[tuple[str, str], list] = {}   # (module, layer) -> max |grad| of its output, per backward
        self.clipped: dict[str, list] = {}   # module -> [ratios outside 1 +- clip_param, ratios] on the traced update
        self.importance: dict[str, list] = {}   # module -> [sum of clamped behaviour / learner ratios, ratios] (IMPALA)
        self.saturated: dict[tuple[str, str], list] = {}   # (module, layer) -> [outputs of its activation at a bound, outputs]
        self.last_batch: Any = None
        self.last_norms: dict[str, dict[str, float]] = {}
        self.trace_now = False
        self.force = False
        self.shared: dict[str, bool] = {}
        self.history: deque = deque(maxlen=16)
        self._orig_grads = learner.compute_gradients
        self._orig_losses = learner.compute_losses
        self._orig_after = getattr(learner, "after_gradient_based_update", None)
        self._orig_make = getattr(learner, "_make_batch_if_necessary", None)
        self.full_batch: Any = None   # the update's whole train batch (after the learner connector), until it ends

    # -- installation ----------------------------------------------------------------------
    def install(self, trace_first: bool = True) -> None:
        self.learner.compute_gradients = self._compute_gradients
        self.learner.compute_losses = self._compute_losses
        if self._orig_after is not None:
            self.learner.after_gradient_based_update = self._after_update
        if self._orig_make is not None:
            self.learner._make_batch_if_necessary = self._make_batch
        self._map_params()
        if trace_first:
            self._arm()  # the first update is traced

    def uninstall(self) -> None:
        self._disarm()
        self.learner.compute_gradients = self._orig_grads
        self.learner.compute_losses = self._orig_losses
        if self._orig_after is not None:
            self.learner.after_gradient_based_update = self._orig_after
        if self._orig_make is not None:
            self.learner._make_batch_if_necessary = self._orig_make

    def _modules(self) -> dict[str, Any]:
        return modules_of(self.learner)

    def _map_params(self) -> None:
        self.names = {}
        for mid, m in self._modules().items():
            try:
                for name, p in m.named_parameters():
                    self.names[id(p)] = (mid, _layer_of(name))
                cfg = getattr(m, "model_config", None) or {}
                shared = cfg.get("vf_share_layers") if isinstance(cfg, dict) else getattr(cfg, "vf_share_layers", None)
                self.shared[mid] = bool(shared)
            except Exception:
                continue

    # -- the wrapped Learner methods -------------------------------------------------------
    def _compute_losses(self, *args: Any, **kwargs: Any) -> Any:
        batch = kwargs.get("batch")
        if batch is None and len(args) > 1:
            batch = args[1]
        self.last_batch = batch
        losses = self._orig_losses(*args, **kwargs)
        if self.trace_now and self.enabled:
            t0 = time.perf_counter()
            try:
                clip_counts(self.learner, self._modules(), kwargs.get("fwd_out"), batch, self.clipped,
                            self.importance)
            except Exception:   # a learner without PPO's columns: no clip fraction
                pass
            self.spent_s += time.perf_counter() - t0
        return losses

    def _compute_gradients(self, loss_per_module: Any, **kwargs: Any) -> Any:
        grads = self._orig_grads(loss_per_module, **kwargs)
        t0 = time.perf_counter()
        finite = self._guard(loss_per_module, grads)   # every update, before the optimizer steps
        if not self.enabled:
            self.spent_s += time.perf_counter() - t0
            return grads
        try:
            self.calls += 1
            if self.trace_now:
                self._disarm()
                bad = self._trace(grads, [m for m in loss_per_module if m != ALL_MODULES])
                if bad and finite:   # a NaN gradient under a finite loss: the guard's slow path
                    self._guard(loss_per_module, grads, grads_bad=True)
            if self.force or self.calls % self.grad_every == self.grad_every - 1:   # the next one is traced
                self.force = False
                self._arm()
        except Exception as e:  # tracing must never stop an update; off, and said (WATCHER_OFF on the driver)
            self.errors += 1
            self.enabled = False
            self.off_reason = error_line(e)
            self.off_traceback = traceback_text(e)
            self._disarm()
            logger.warning("flow1: learner tracing turned off after an error: %s", self.off_reason)
            try:   # the driver reads this flag from the result at once
                self.learner.metrics.log_value((ALL_MODULES, "flow1", "tracing_off"), 1, reduce="max")
            except Exception:
                pass
        self.spent_s += time.perf_counter() - t0
        if self._orig_after is None:   # no end-of-update hook to log from: each minibatch logs
            self._log_spent()
        return grads

    def _guard(self, loss_per_module: Any, grads: Any, grads_bad: bool = False) -> bool:
        """The NaN guard's check of this update (learner/nan_guard.py); True: finite (or no guard)."""
        if self.guard is None:
            return True
        try:
            return self.guard.check(loss_per_module, grads, self.last_batch, self.full_batch, grads_bad)
        except Exception as e:   # the guard is flow1's: off, and said in the status
            self.guard, self.guard_off = None, error_line(e)
            logger.warning("flow1: the learner's NaN guard turned off after an error: %s", self.guard_off)
            return True

    def _after_update(self, *args: Any, **kwargs: Any) -> Any:
        """RLlib's end of one ``Learner.update`` call (all its minibatches), just before the
        call reduces its metrics: the tracing's time is logged here, once per call, not once
        per minibatch (PPO's default ~940 per iteration, ~10 us each)."""
        self.full_batch = None
        out = self._orig_after(*args, **kwargs)
        self._log_spent()
        return out

    def _make_batch(self, *args: Any, **kwargs: Any) -> Any:
        """RLlib's whole train batch of one ``update`` (the learner connector's output), kept by
        reference until the update ends: where a minibatch's columns came in NaN/inf, the NaN
        guard's dump takes the rows they were computed from out of it."""
        batch = self._orig_make(*args, **kwargs)
        self.full_batch = batch
        return batch

    def _log_spent(self) -> None:
        """The tracing's own time since the last log, in the iteration's learner results
        (``learners/__all_modules__/flow1/tracing_s``, summed per iteration): its cost,
        measured. Logged at the end of every ``update`` call, traced or not (a sum with no
        value in an iteration reads NaN)."""
        spent, self._logged_s = self.spent_s - self._logged_s, self.spent_s
        try:
            self.learner.metrics.log_value((ALL_MODULES, "flow1", "tracing_s"), spent, reduce="sum")
        except Exception:
            pass

    def _trace(self, grads: dict, trained: list) -> bool:
        """Trace this update; whether a gradient was NaN/inf."""
        sq = self._squares(grads, set(trained))
        if not sq:
            return False
        out = self._layer_rms(sq)
        self._batch_measures(out)
        self._reach_and_heads(out)
        self.traces += 1
        self._log(out)
        with self.lock:
            self.last_norms = {mid: dict(o["grad_rms"]) for mid, o in out.items()}
        return any(o["nonfinite"] for o in out.values())

    def _squares(self, grads: dict, trained: set) -> dict[tuple[str, str], list]:
        """(module, layer) -> [the squared sums of its parameters' gradients (on the device), its
        number of gradient entries], for the modules this update trained."""
        sq: dict[tuple[str, str], list] = {}
        for ref, g in grads.items():
            where = self.names.get(id(ref))
            if where is None:
                if id(ref) in self.foreign:
                    continue
                self._map_params()   # a module added since: map again, once per new parameter
                where = self.names.get(id(ref))
                if where is None:
                    self.foreign.add(id(ref))
                    continue
            mid, layer = where
            if mid not in trained:
                continue
            entry = sq.setdefault((mid, layer), [[], 0])
            if g is None:
                entry[1] += ref.numel()
                continue
            entry[0].append(g.detach().float().pow(2).sum())
            entry[1] += g.numel()
        return sq

    def _layer_rms(self, sq: dict[tuple[str, str], list]) -> dict[str, dict]:
        """Per module: each layer's gradient RMS, the squared norm and the non-finite layers,
        read back from the device in one transfer."""
        import torch

        keys = list(sq)
        zero = torch.zeros(())
        totals = torch.stack([torch.stack(sq[k][0]).sum() if sq[k][0] else zero for k in keys]).cpu().tolist()
        out: dict[str, dict] = {}
        for (mid, layer), total in zip(keys, totals):
            o = out.setdefault(mid, {"grad_rms": {}, "sumsq": 0.0, "nonfinite": 0})
            if not math.isfinite(total):
                o["nonfinite"] += 1
                continue
            o["grad_rms"][layer] = math.sqrt(total / max(1, sq[(mid, layer)][1]))
            o["sumsq"] += total
        return out

    def _batch_measures(self, out: dict[str, dict]) -> None:
        """What the traced update's forward and batch showed: dormant and saturated units, the
        rewards' range, PPO's clipped ratios, IMPALA's importance weights."""
        for (mid, layer), (acc, rows) in self.acts.items():
            if mid not in out:
                continue
            mean = acc / max(1, rows)
            avg = float(mean.mean())
            share = float((mean <= self.tau * avg).float().mean()) if avg > 0 else 1.0
            out[mid].setdefault("dormant", {})[layer] = share
        for (mid, layer), (k, n) in self.saturated.items():
            if mid in out and n:
                out[mid].setdefault("saturated", {})[layer] = float(k) / n
        for mid, (lo, hi) in reward_range(self.last_batch, out).items():
            out[mid]["reward_min"], out[mid]["reward_max"] = lo, hi
        for mid, (k, n) in self.clipped.items():
            if mid in out:
                out[mid]["clipped"], out[mid]["ratios"] = float(k), float(n)
        for mid, (k, n) in self.importance.items():
            if mid in out:
                out[mid]["is_sum"], out[mid]["is_n"] = float(k), float(n)

    def _reach_and_heads(self, out: dict[str, dict]) -> None:
        """Whether the loss's gradient reached each layer's output (1, 0: all zeros, -1: not at
        all), and the value head's gradient against the policy head's."""
        import torch

        reach = [(k, v) for k, v in self.reach.items() if k[0] in out]
        arrived = torch.stack([torch.stack(v).amax().float() for _, v in reach if v]).cpu().tolist() \
            if any(v for _, v in reach) else []
        it = iter(arrived)
        for (mid, layer), v in reach:
            out[mid].setdefault("reach", {})[layer] = (1 if next(it) > 0 else 0) if v else -1
        for mid in out:
            vf, pi = self.head_grads.get((mid, "vf")), self.head_grads.get((mid, "pi"))
            if vf is not None and pi is not None and pi > 0 and self.shared.get(mid):
                out[mid]["vf_pi_trunk_ratio"] = vf / pi
            head_vf = [v for k, v in out[mid]["grad_rms"].items() if k.split(".")[0] == "vf"]
            head_pi = [v for k, v in out[mid]["grad_rms"].items() if k.split(".")[0] == "pi"]
            if head_vf and head_pi and sum(head_pi) > 0:
                out[mid]["vf_pi_head_ratio"] = sum(head_vf) / sum(head_pi)

    def _log(self, out: dict) -> None:
        m = self.learner.metrics
        for mid, o in out.items():
            m.log_value((mid, "flow1", "traces"), 1, reduce="sum")
            m.log_value((mid, "flow1", "grad_norm"), math.sqrt(o["sumsq"]), window=1)
            m.log_value((mid, "flow1", "grad_nonfinite"), o["nonfinite"], reduce="sum")
            for layer, v in o["grad_rms"].items():
                m.log_value((mid, "flow1", "grad_rms", layer), v, window=1)
            for layer, v in o.get("dormant", {}).items():
                m.log_value((mid, "flow1", "dormant", layer), v, window=1)
            for layer, v in o.get("reach", {}).items():
                m.log_value((mid, "flow1", "reach", layer), v, window=1)
            for layer, v in o.get("saturated", {}).items():
                m.log_value((mid, "flow1", "saturated", layer), v, window=1)
            for key in ("vf_pi_trunk_ratio", "vf_pi_head_ratio"):
                if key in o:
                    m.log_value((mid, "flow1", key), o[key], window=1)
            for key in ("clipped", "ratios", "is_sum", "is_n"):   # per iteration: the fractions are their quotients
                if key in o:
                    m.log_value((mid, "flow1", key), o[key], reduce="sum")
            for key, how in (("reward_min", "min"), ("reward_max", "max")):   # across Learners too
                if key in o:
                    m.log_value((mid, "flow1", key), o[key], reduce=how, window=1)

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self, max_rows: int = 4096) -> dict:
        """The latest train batch's columns (numpy, at most ``max_rows`` rows per module) and
        the latest per-layer gradient RMS; the next update is traced too."""
        self.force = True
        out: dict = {"modules": {}, "grad_rms": {}, "traces": self.traces}
        with self.lock:
            out["grad_rms"] = {m: dict(v) for m, v in self.last_norms.items()}
        out["modules"] = batch_columns(self.last_batch, SNAPSHOT_COLUMNS, max_rows)
        return out

    def status(self) -> dict:
        return {"calls": self.calls, "traces": self.traces, "errors": self.errors, "enabled": self.enabled,
                "off_reason": self.off_reason, "off_traceback": self.off_traceback,
                "grad_every": self.grad_every, "spent_s": round(self.spent_s, 4),
                "guard": self.guard.status() if self.guard is not None else {"off": self.guard_off}}


def install(learner: Any, grad_every: int = 50, dormant_tau: float = 0.025, run_id: str | None = None,
            rank: int = 0, dump: bool = True) -> dict:
    """Install (once) the tracing and the NaN guard on ``learner``; returns its status.
    Idempotent: a learner actor that Ray restarted comes back without it, and the driver calls
    this again. ``run_id``: where the guard's dump goes (the run's hub); ``dump``: whether it is made."""
    tracer = getattr(learner, ATTR, None)
    if tracer is None:
        tracer = LearnerTracer(learner, grad_every, dormant_tau, run_id, rank, dump)
        tracer.install()
        setattr(learner, ATTR, tracer)
    return tracer.status()


def trace_next(learner: Any) -> bool:
    """Trace the Learner's next update (a return drop wants the gradients now)."""
    tracer = getattr(learner, ATTR, None)
    if tracer is not None:
        tracer.force = True
    return tracer is not None


def take_snapshot(learner: Any, max_rows: int = 4096) -> dict:
    tracer = getattr(learner, ATTR, None)
    return tracer.snapshot(max_rows) if tracer is not None else {}
