"""The Learner's NaN guard: each update's losses and gradients checked for NaN/inf before the
optimizer steps, and on the first one the state that produced it sent to the run's ``repro/``.

RLlib's TorchLearner turns a NaN/inf gradient into zeros (or skips the update, with
``torch_skip_nan_gradients``) and goes on, with a log warning: the module learns nothing from
that batch, and ``nan_to_num`` turns an inf into the largest float, which poisons Adam's
moments. Where the NaN came from (the batch, a layer, an operation of the loss) is gone by the
time anyone looks. Here, once per update (``compute_gradients`` of every minibatch, wrapped by
:class:`~flow1_ray.learner.tracer.LearnerTracer`), each module's loss is checked in one read-back
(``item()``: ~2 us on a CPU inside RLlib's update, which takes ~3-5 ms for its default PPO model): a NaN in the batch,
the weights or the forward reaches the loss. A gradient that is NaN/inf under a finite loss (a
``sqrt`` at 0, a norm of a zero vector) is caught on the traced updates (one in ``grad_every``),
whose per-layer gradient norms the tracer computes anyway: checking every gradient tensor on every
update costs ~60 us (1.5-2 % of the update), more than the goal of 1 %. A non-finite one is counted in the Learner's metrics
(``learners/<module>/flow1/nonfinite_loss`` / ``nonfinite_grad``: LEARNER_NONFINITE on the
driver) and, for the first of the process (and later ones at most every DUMP_EVERY_S, MAX_DUMPS
in all), the update's state *before* the optimizer steps is sent to the hub's ``repro/``
(fire-and-forget, from a thread): the minibatch, each trained module's weights, its optimizers'
state, and what rebuilds the Learner (its class, the config's plain values, each module's
class, spaces and model config). ``flow1 replay`` runs that update again on the CPU
(:mod:`flow1_ray.replay.learner`). The dump's name reaches the driver through the metrics as a
number (:func:`~flow1_ray.common.schema.learner_repro_id`).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Any

from ..common import codes as C
from ..common import schema as S
from ..common.names import NAMESPACE, hub_name
from ..rundir.repro import MAX_ENTRY_BYTES, plain_values

logger = logging.getLogger("flow1_ray")

#: dumps one Learner process sends at most: the first, then at most one per DUMP_EVERY_S
MAX_DUMPS = 3
DUMP_EVERY_S = 300.0
#: rows of the minibatch kept (RLlib's minibatches are smaller; a whole train batch is cut)
MAX_BATCH_ROWS = 4096


def _path(obj: Any) -> str | None:
    """``module:qualname`` of a class another process can import by that name, or None."""
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}:{qual}" if module and qual and "<" not in qual and module != "__main__" else None


def _class_path(cls: type) -> str | None:
    """The first class of ``cls``'s MRO that its name imports back to (a Learner in a Ray
    actor is an instance of a wrapper class Ray made; its base is the user's Learner)."""
    import importlib

    for c in cls.__mro__[:-1]:
        path = _path(c)
        if path is None:
            continue
        module, _, qual = path.partition(":")
        try:
            obj = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
        except Exception:
            continue
        if obj is c:
            return path
    return None


def _number(t: Any) -> float:
    try:
        return float(t.detach().float().sum())
    except Exception:
        return math.nan


def _finite(loss: Any) -> bool:
    """A loss is finite: a scalar read back with ``item()`` (~2 us inside RLlib's update, where a
    torch reduction on it costs ~70 us), anything larger checked whole."""
    if not hasattr(loss, "detach"):
        return True
    if loss.numel() == 1:
        return math.isfinite(loss.item())
    import torch

    return bool(torch.isfinite(loss.detach()).all())


def _said(v: float) -> str:
    """A float as JSON can hold it: a number, or "nan", "inf", "-inf"."""
    return repr(v) if math.isfinite(v) else str(v)


class NonfiniteGuard:
    """The guard of one Learner (``names``: id(param) -> (module, layer), the tracer's)."""

    def __init__(self, learner: Any, run_id: str | None = None, rank: int = 0, dump: bool = True) -> None:
        self.learner = learner
        self.run_id = run_id
        self.rank = int(rank)
        self.dump = bool(dump and run_id)
        self.updates = 0
        self.tripped = 0
        self.dumps = 0
        self.last_dump = -math.inf
        self.dump_error: str | None = None
        self.spent_s = 0.0   # the guard's own time, dumps included (also in the tracer's)

    def check(self, loss_per_module: dict, grads: dict, batch: Any, full: Any = None,
              grads_bad: bool = False) -> bool:
        """Whether this update's losses are finite (one read-back); ``grads_bad``: the tracer
        found a NaN/inf gradient on this (traced) update. A non-finite one is counted and,
        within the bounds, dumped."""
        t0 = time.perf_counter()
        try:
            return self._check(loss_per_module, grads, batch, full, grads_bad)
        finally:
            self.spent_s += time.perf_counter() - t0

    def _check(self, loss_per_module: dict, grads: dict, batch: Any, full: Any, grads_bad: bool) -> bool:
        mids = [m for m in loss_per_module if m != S.ALL_MODULES]
        if not grads_bad:
            self.updates += 1
            if all(_finite(loss_per_module[m]) for m in mids):
                return True
        self.tripped += 1
        failure = self._what(loss_per_module, mids, grads)
        for mid in failure["modules"]:
            self.learner.metrics.log_value((mid, S.RESULT_KEY, S.NONFINITE_LOSS),
                                           int(mid in failure["loss"]), reduce="sum")
            self.learner.metrics.log_value((mid, S.RESULT_KEY, S.NONFINITE_GRAD),
                                           int(bool(failure["grads"].get(mid))), reduce="sum")
        now = time.monotonic()
        if self.dump and self.dumps < MAX_DUMPS and now - self.last_dump >= DUMP_EVERY_S:
            self.dumps, self.last_dump = self.dumps + 1, now
            try:
                self._dump(batch, failure, full)
            except Exception as e:   # the dump is flow1's; the update goes on (said in the manifest-less result)
                self.dump_error = f"{type(e).__name__}: {e}"[:300]
                logger.warning("flow1: the learner's NaN dump failed: %s", self.dump_error)
        return False

    def _what(self, loss_per_module: dict, mids: list, grads: dict) -> dict:
        """Which losses and which parameters' gradients are not finite (the slow path: once)."""
        import torch

        loss = {str(m): _said(_number(loss_per_module[m])) for m in mids
                if not math.isfinite(_number(loss_per_module[m]))}
        names = self._param_names()
        bad: dict[str, list[str]] = {}
        for ref, g in grads.items():
            if g is not None and not bool(torch.isfinite(g).all()):
                mid, name = names.get(id(ref), ("?", "?"))
                bad.setdefault(mid, []).append(name)
        modules = sorted(set(loss) | set(bad)) or [str(m) for m in mids]
        return {"loss": loss, "grads": bad, "modules": modules, "update": self.updates}

    def _param_names(self) -> dict[int, tuple[str, str]]:
        out = {}
        for mid, m in self._modules().items():
            try:
                for name, p in m.named_parameters():
                    out[id(p)] = (str(mid), name)
            except Exception:
                continue
        return out

    def _modules(self) -> dict:
        module = self.learner.module
        try:
            return {str(mid): module[mid] for mid in module.keys()}
        except Exception:
            return {S.DEFAULT_MODULE_ID: module}

    # -- the dump ------------------------------------------------------------------------------
    def _dump(self, batch: Any, failure: dict, full: Any = None) -> None:
        import numpy as np

        arrays, index, left_out = {}, {}, []

        def add(arr: Any, **what: Any) -> None:
            key = f"a{len(index)}"
            arrays[key], index[key] = arr, what

        modules = self._modules()
        trained = [m for m in failure["modules"] if m in modules]
        for mid, cols in (batch.items() if isinstance(batch, dict) else []):
            if str(mid) in trained and isinstance(cols, dict):
                got = _numeric(cols, (), left_out)
                for path, arr in got:
                    add(arr[:MAX_BATCH_ROWS], what="batch", module=str(mid), path=list(path))
                if any(a.dtype.kind == "f" and not np.isfinite(a).all() for _, a in got):
                    for path, arr in _upstream(full, mid):   # the rows the NaN columns were computed from
                        add(arr, what="upstream", module=str(mid), path=list(path))
        weights, optim = {}, {}
        for mid in trained:
            for name, t in modules[mid].state_dict().items():
                if hasattr(t, "detach"):
                    weights[(mid, name)] = t.detach().cpu().numpy()
        for full, opt in (getattr(self.learner, "_named_optimizers", None) or {}).items():
            mid = next((m for m in trained if full.startswith(f"{m}_")), None)
            if mid is not None:
                optim[full] = (mid, opt.state_dict())
        used = sum(a.nbytes for a in arrays.values())
        wbytes = sum(a.nbytes for a in weights.values())
        obytes = sum(getattr(t, "nbytes", 0) for _, sd in optim.values() for st in sd["state"].values()
                     for t in st.values() if hasattr(t, "nbytes"))
        if used + wbytes + obytes > MAX_ENTRY_BYTES:
            left_out.append(f"the optimizer state ({obytes / 1e6:.1f} MB): over the entry's "
                            f"{MAX_ENTRY_BYTES // 1024**2} MB")
            optim = {}
        if used + wbytes > MAX_ENTRY_BYTES:
            left_out.append(f"the weights ({wbytes / 1e6:.1f} MB): over the entry's {MAX_ENTRY_BYTES // 1024**2} MB")
            weights = {}
        for (mid, name), arr in weights.items():
            add(arr, what="weight", module=mid, name=name)
        optimizers = {}
        for full, (mid, sd) in optim.items():
            for idx, st in sd["state"].items():
                for key, t in st.items():
                    if hasattr(t, "detach"):
                        add(t.detach().cpu().numpy(), what="optim", optimizer=full, param=int(idx), key=str(key))
            optimizers[full] = {"module": mid, "class": _path(type(self.learner._named_optimizers[full])),
                                "param_groups": plain_values(sd["param_groups"])}
        self._send(arrays, self._manifest(failure, index, optimizers, left_out, trained))

    def _manifest(self, failure: dict, index: dict, optimizers: dict, left_out: list, trained: list) -> dict:
        lr = self.learner
        config = getattr(lr, "config", None)
        modules = self._modules()
        specs = {}
        for mid in trained:
            specs[mid] = _module_spec(modules[mid])
        what = "; ".join([f"module {m!r}'s loss is {v}" for m, v in failure["loss"].items()] +
                         [f"module {m!r}: {len(ps)} gradient tensor(s) NaN/inf ({', '.join(ps[:3])})"
                          for m, ps in failure["grads"].items()])
        return {
            "finding": C.LEARNER_NONFINITE, "kind": "learner", "worker_index": self.rank, "pid": os.getpid(),
            "node_id": _node_id(), "message": f"update {failure['update']} of learner {self.rank}: {what}",
            "env": {}, "start": {},
            "failure": {"call": "update", "step": failure["update"], "loss": failure["loss"],
                        "grads": failure["grads"], "nonfinite": "loss" if failure["loss"] else "gradient"},
            "learner": {"class": _class_path(type(lr)), "config_class": _path(type(config)),
                        "config": config_values(config), "multi_class": _path(type(lr.module)),
                        "modules": specs, "optimizers": optimizers, "arrays": index, "left_out": left_out},
        }

    def _send(self, arrays: dict, manifest: dict) -> None:
        name = S.repro_entry_name("learner", self.rank, os.getpid(), self.dumps, C.LEARNER_NONFINITE)
        for mid in manifest["failure"]["grads"].keys() | manifest["failure"]["loss"].keys():
            self.learner.metrics.log_value((mid, S.RESULT_KEY, S.LEARNER_REPRO_ID),
                                           S.learner_repro_id(self.rank, os.getpid(), self.dumps), reduce="max")
        run_id = self.run_id

        def send() -> None:
            try:
                import ray

                ray.get_actor(hub_name(run_id), namespace=NAMESPACE).add_repro.remote(
                    name, arrays, manifest, f"{C.LEARNER_NONFINITE}:learner{self.rank}")
            except Exception as e:   # no hub (it restarts, or the run ends): the dump is lost, said in the log
                logger.warning("flow1: the learner's NaN dump could not be sent: %s", e)
        threading.Thread(target=send, name="flow1-learner-repro", daemon=True).start()

    def status(self) -> dict:
        return {"updates": self.updates, "nonfinite": self.tripped, "dumps": self.dumps,
                "dump_error": self.dump_error, "spent_s": round(self.spent_s, 6)}


def _numeric(cols: dict, prefix: tuple, left_out: list) -> list[tuple[tuple, Any]]:
    """The batch's numeric tensors and arrays as numpy, by their path in its nested dicts."""
    import numpy as np

    out = []
    for key, v in cols.items():
        path = prefix + (str(key),)
        if isinstance(v, dict):
            out += _numeric(v, path, left_out)
            continue
        try:
            arr = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v) if isinstance(v, np.ndarray) else None
        except Exception:
            arr = None
        if arr is None or arr.dtype.kind not in "biuf":
            left_out.append(f"batch column {'/'.join(path)} ({type(v).__name__}: not a numeric array)")
            continue
        out.append((path, np.ascontiguousarray(arr)))
    return out


def _upstream(full: Any, mid: Any) -> list[tuple[tuple, Any]]:
    """The rows of the update's whole train batch (module ``mid``'s) with a NaN/inf in any
    column, at most MAX_BATCH_ROWS, with their row numbers (path ``("__row__",)``): a column
    that came into a minibatch NaN (PPO's advantages, normalised over the whole batch) was
    computed from them, and the replay runs the module on them."""
    import numpy as np

    cols = getattr(full, "policy_batches", full)
    cols = cols.get(mid) if isinstance(cols, dict) else None
    if not isinstance(cols, dict):
        return []
    got = _numeric(cols, (), [])
    n = max((len(a) for _, a in got if a.ndim), default=0)
    bad = np.zeros(n, dtype=bool)
    for _, a in got:
        if a.ndim and len(a) == n and a.dtype.kind == "f":
            bad |= ~np.isfinite(a.reshape(n, -1)).all(axis=1)
    rows = np.flatnonzero(bad)[:MAX_BATCH_ROWS]
    if not len(rows):
        return []
    return [(("__row__",), rows)] + [(p, a[rows]) for p, a in got if a.ndim and len(a) == n]


def _module_spec(m: Any) -> dict:
    """What rebuilds one RLModule in another process: its class, its catalog's, its spaces (as
    RLlib serialises them) and its model config's plain values."""
    from ray.rllib.utils.serialization import gym_space_to_dict

    cfg = getattr(m, "model_config", None)
    if cfg is not None and not isinstance(cfg, dict):
        try:
            import dataclasses

            cfg = dataclasses.asdict(cfg)
        except Exception:
            cfg = None
    return {"class": _path(type(m)), "catalog_class": _path(getattr(m, "catalog_class", None)) if
            getattr(m, "catalog_class", None) is not None else None,
            "observation_space": gym_space_to_dict(m.observation_space),
            "action_space": gym_space_to_dict(m.action_space),
            "model_config": plain_values(cfg) if isinstance(cfg, dict) else None}


#: config keys never carried to a replay: code, envs and what only the sampling side uses
_CONFIG_SKIPPED = ("env", "env_config", "callbacks", "policies", "policy_mapping_fn", "logger_config",
                   "evaluation_config", "input_", "output", "_rl_module_spec", "rl_module_spec")


def config_values(config: Any) -> dict:
    """The AlgorithmConfig's plain values that differ from its class's defaults (numbers,
    strings, bools, lists and dicts of them): what ``update_from_dict`` takes back without
    running any code."""
    try:
        d, base = config.to_dict(), type(config)().to_dict()
    except Exception:
        return {}
    out = {}
    for k, v in d.items():
        if k in _CONFIG_SKIPPED or k.endswith(("_class", "_fn", "_classes")) or "connector" in k:
            continue
        pv = plain_values(v, strict=True)
        if pv is not None and v != base.get(k):
            out[k] = pv
    return out


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:
        return None
