"""A Learner's NaN dump (learner/nan_guard.py) played again: the update run once more, on the
CPU, from the state it had before the optimizer stepped.

The Learner is rebuilt from the manifest (its class, the AlgorithmConfig's class and plain
values, each RLModule's class, spaces and model config: no code comes from the entry, the
classes are imported by name), the weights and the optimizers' state are loaded, and the
minibatch is put back. Then, before anything runs, what came in is checked: a weight, an
optimizer moment or a batch column already NaN/inf was made earlier (an earlier update, or the
learner connector that computed the batch's advantages) and is named with its rows. The
forward pass and the losses run under a torch function mode that stops at the first operation
whose output holds a NaN/inf while its inputs are finite, named with the layer it ran in (the
innermost RLModule sub-module), the batch rows it broke on and the source line that called it.
A loss that comes out finite while the run's gradients were not is backpropagated under
``torch.autograd.detect_anomaly``, which names the backward function and the forward line
that produced the NaN.

*reproduced*: the same module's loss, or gradient, is NaN/inf again; *did not reproduce*:
all finite here (a NaN that needs the GPU's arithmetic, or nondeterminism).
"""

from __future__ import annotations

import os
import re
import traceback
import warnings
from typing import Any

from ..common.errors import Flow1InputError
from ..common.events import one_line
from .env import NOT_REPRODUCED, REPRODUCED, _import

#: rows named in an answer
SHOWN_ROWS = 5


def _spec(mid: str, d: dict) -> Any:
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.utils.serialization import gym_space_from_dict

    if not isinstance(d, dict) or not d.get("class"):
        raise Flow1InputError(f"module {mid!r}: its class was not recorded; the Learner cannot be rebuilt")
    try:
        obs, act = gym_space_from_dict(d["observation_space"]), gym_space_from_dict(d["action_space"])
    except Exception as e:   # noqa: BLE001 -- a damaged space: one line
        raise Flow1InputError(f"module {mid!r}: its spaces cannot be read back ({type(e).__name__}: "
                              f"{one_line(e)[:120]})") from None
    return RLModuleSpec(module_class=_import(d["class"]), observation_space=obs, action_space=act,
                        model_config=d.get("model_config") if isinstance(d.get("model_config"), dict) else None,
                        catalog_class=_import(d["catalog_class"]) if d.get("catalog_class") else None)


def _arrays(index: dict, arrays: dict) -> tuple[dict, dict, dict, dict]:
    """The entry's arrays by what its manifest says each is: (weights by module, the minibatch,
    the upstream rows, the optimizers' state by optimizer and parameter index), as tensors."""
    import numpy as np
    import torch

    weights: dict = {}
    batch: dict = {}
    upstream: dict = {}
    optim: dict = {}
    for key, what in index.items():
        if key not in arrays:
            raise Flow1InputError(f"array {key} ({what.get('what')}) is in the manifest but not in the arrays")
        t = torch.from_numpy(np.array(arrays[key]))
        mid = str(what.get("module"))
        if what["what"] == "weight":
            weights.setdefault(mid, {})[str(what.get("name"))] = t
        elif what["what"] in ("batch", "upstream"):
            d = (batch if what["what"] == "batch" else upstream).setdefault(mid, {})
            path = [str(p) for p in what.get("path") or []] or [key]
            for p in path[:-1]:
                d = d.setdefault(p, {})
            d[path[-1]] = t
        else:
            optim.setdefault(str(what.get("optimizer")), {}).setdefault(int(what.get("param", 0)), {})[
                str(what.get("key"))] = t
    return weights, batch, upstream, optim


def rebuild(man: dict, arrays: dict) -> tuple[Any, dict, dict]:
    """(the Learner with the run's weights and optimizer state, the minibatch as tensors, the
    train batch's rows that NaN columns of the minibatch were computed from)."""
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    lr = man["learner"]
    if not lr.get("class") or not lr.get("config_class"):
        raise Flow1InputError("the Learner's class or its config's class was not recorded: it cannot be rebuilt")
    config = _import(lr["config_class"])()
    try:
        config.update_from_dict(dict(lr.get("config") or {}))
        config.learners(num_learners=0, num_gpus_per_learner=0)
    except Exception as e:   # noqa: BLE001
        raise Flow1InputError(f"the run's config cannot be rebuilt: {type(e).__name__}: {one_line(e)[:200]}") from None
    specs = {mid: _spec(mid, d) for mid, d in lr["modules"].items()}
    multi = MultiRLModuleSpec(rl_module_specs=specs, **(
        {"multi_rl_module_class": _import(lr["multi_class"])} if lr.get("multi_class") else {}))
    try:
        learner = _import(lr["class"])(config=config, module_spec=multi)
        learner.build()
    except Exception as e:   # noqa: BLE001
        raise Flow1InputError(f"the Learner cannot be rebuilt here: {type(e).__name__}: {one_line(e)[:200]}") from None
    weights, batch, upstream, optim = _arrays(lr["arrays"], arrays)
    for mid, state in weights.items():
        try:
            learner.module[mid].load_state_dict(state, strict=True)
        except Exception as e:   # noqa: BLE001
            raise Flow1InputError(f"module {mid!r}: the recorded weights do not fit the rebuilt module "
                                  f"({type(e).__name__}: {one_line(e)[:200]})") from None
    for full, d in (lr.get("optimizers") or {}).items():
        opt = getattr(learner, "_named_optimizers", {}).get(full)
        if opt is None or full not in optim:
            continue
        try:
            opt.load_state_dict({"state": optim[full], "param_groups": d.get("param_groups") or []})
        except Exception as e:   # noqa: BLE001
            raise Flow1InputError(f"optimizer {full!r}: the recorded state does not fit ({type(e).__name__}: "
                                  f"{one_line(e)[:200]})") from None
    return learner, batch, upstream


def _bad_rows(t: Any, n: int | None) -> list[int]:
    import torch

    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() == 0 or (n and t.shape[0] != n):
        return []
    bad = ~torch.isfinite(t.detach()).reshape(t.shape[0], -1).all(dim=1)
    return [int(i) for i in bad.nonzero().flatten()[:SHOWN_ROWS]]


def _nonfinite(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t.detach()).all())


def came_in(learner: Any, batch: dict) -> list[str]:
    """What was already NaN/inf before the update ran: weights, optimizer moments, batch columns."""
    out = []
    for mid, cols in batch.items():
        try:
            for name, p in learner.module[mid].named_parameters():
                if _nonfinite(p):
                    out.append(f"module {mid!r}'s weight {name} already holds NaN/inf (an earlier update wrote it)")
        except Exception:
            pass
        for path, t in _leaves(cols, ()):
            if _nonfinite(t):
                rows = _bad_rows(t, None)
                out.append(f"module {mid!r}'s batch column {'/'.join(path)} came into the update NaN/inf (rows {rows})")
    for full, opt in (getattr(learner, "_named_optimizers", None) or {}).items():
        for st in opt.state.values():
            if any(_nonfinite(v) for v in st.values()):
                out.append(f"optimizer {full} holds a NaN/inf moment (an earlier update's inf gradient)")
                break
    return out


def _leaves(d: dict, prefix: tuple) -> list:
    out = []
    for k, v in d.items():
        out += _leaves(v, prefix + (str(k),)) if isinstance(v, dict) else [(prefix + (str(k),), v)]
    return out


class FirstNonfinite:
    """A torch function mode with global module hooks: the first operation whose floating output
    holds a NaN/inf while every tensor it was given is finite; with the innermost named module it
    ran in, the batch rows it broke on and the calling line outside torch."""

    def __init__(self, names: dict, rows: int | None) -> None:
        self.names, self.rows = names, rows
        self.stack: list[str] = []
        self.found: dict | None = None
        self._mode = None
        self._hooks: list = []

    def __enter__(self) -> "FirstNonfinite":
        import torch
        from torch.overrides import TorchFunctionMode

        outer = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):   # noqa: ANN001
                out = func(*args, **(kwargs or {}))
                if outer.found is None:
                    outer._look(func, args, kwargs or {}, out)
                return out

        reg = torch.nn.modules.module
        self._hooks = [reg.register_module_forward_pre_hook(self._enter),
                       reg.register_module_forward_hook(self._leave)]
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        for h in self._hooks:
            h.remove()

    def _enter(self, module: Any, args: Any) -> None:
        name = self.names.get(id(module))
        if name is not None:
            self.stack.append(name)

    def _leave(self, module: Any, args: Any, out: Any) -> None:
        if self.names.get(id(module)) is not None and self.stack:
            self.stack.pop()

    def _look(self, func: Any, args: Any, kwargs: dict, out: Any) -> None:
        import torch

        outs = out if isinstance(out, (tuple, list)) else [out]
        bad = [t for t in outs if _nonfinite(t)]
        if not bad:
            return
        ins = [t for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]
        ins += [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
        if any(_nonfinite(t) for t in ins):
            return
        frame = next((f for f in reversed(traceback.extract_stack())
                      if f"{os.sep}torch{os.sep}" not in f.filename and f.filename != __file__), None)
        self.found = {"op": _op_name(func),
                      "layer": self.stack[-1] if self.stack else None, "rows": _bad_rows(bad[0], self.rows),
                      "frame": f"{frame.name} ({os.path.basename(frame.filename)}:{frame.lineno}): {frame.line}"
                      if frame else None,
                      "inputs_max": max((float(t.detach().abs().max()) for t in ins if t.is_floating_point()
                                         and t.numel()), default=None)}


def _op_name(func: Any) -> str:
    """``torch.cosh``, ``Tensor.__mul__``, ``linear``: the operation as a user writes it."""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)
    head, _, last = name.rpartition(".")
    return f"torch.{last}" if head in ("_VariableFunctionsClass", "_C._VariableFunctions") else name


def _anomaly(learner: Any, batch: dict) -> dict | None:
    """The update's forward, losses and backward again under anomaly detection (which records
    each forward operation's stack): the backward function that returned NaN and the forward
    line that made it (the warning PyTorch writes), or None when all is finite."""
    import torch

    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly(check_nan=True):
        warnings.simplefilter("always")
        try:
            fwd_out = learner.module.forward_train(batch)
            learner.compute_gradients(learner.compute_losses(fwd_out=fwd_out, batch=batch))
        except RuntimeError as e:
            m = re.search(r"Function '(\w+)' returned nan values", str(e))
            trace = "\n".join(str(w.message) for w in caught if "Traceback of forward call" in str(w.message))
            return {"backward": m.group(1) if m else one_line(e)[:200], "forward_line": _user_frame(trace)}
    return None


def _user_frame(trace: str) -> str | None:
    """The innermost frame of a traceback's text outside torch: ``fn (file.py:N): code``."""
    lines = trace.splitlines()
    frames = []
    for k, ln in enumerate(lines):
        m = re.match(r'\s*File "(.+)", line (\d+), in (.+)', ln)
        if m:
            code = lines[k + 1].strip() if k + 1 < len(lines) and not lines[k + 1].strip().startswith("File ") else ""
            frames.append((m.group(1), m.group(2), m.group(3), code))
    user = [f for f in frames if f"{os.sep}torch{os.sep}" not in f[0]] or frames
    if not user:
        return None
    path, line, fn, code = user[-1]
    return f"{fn} ({os.path.basename(path)}:{line}): {code}"


def replay_update(man: dict, arrays: dict) -> dict:
    """The update run again (see the module docstring); the outcome as a dict."""
    import torch

    failure = man["failure"]
    learner, batch, upstream = rebuild(man, arrays)
    before = came_in(learner, batch)
    names = {}
    for mid in batch:
        try:
            names.update({id(m): (f"{mid}:{n}" if len(batch) > 1 else n) or type(m).__name__
                          for n, m in learner.module[mid].named_modules()})
        except Exception:
            pass
    rows = next((int(t.shape[0]) for _, t in _leaves(batch, ()) if isinstance(t, torch.Tensor) and t.dim()), None)
    with FirstNonfinite(names, rows) as first:
        fwd_out = learner.module.forward_train(batch)
        losses = learner.compute_losses(fwd_out=fwd_out, batch=batch)
    bad_loss = {str(m): float(v.detach()) for m, v in losses.items() if hasattr(v, "detach") and _nonfinite(v)}
    out: dict = {"step": failure.get("step"), "unit": "update", "came_in": before, "first": first.found,
                 "loss": {m: str(v) for m, v in bad_loss.items()}}
    anomaly = None
    if not bad_loss and failure.get("grads"):
        anomaly = _anomaly(learner, batch)
        out["anomaly"] = anomaly
    out["upstream"] = _upstream(learner, upstream, names)
    recorded_loss = set((failure.get("loss") or {}).keys())
    same = (recorded_loss and recorded_loss <= set(bad_loss)) or (not recorded_loss and anomaly is not None)
    out["result"] = REPRODUCED if same else NOT_REPRODUCED
    out["nonfinite"] = _said(out, bad_loss, anomaly, first.found)
    if not same:
        out["why"] = "every loss and gradient is finite here" if not bad_loss and anomaly is None else \
            f"here the NaN/inf is in {sorted(bad_loss)}; the run's was in {sorted(recorded_loss) or 'a gradient'}"
    return out


def _upstream(learner: Any, upstream: dict, names: dict) -> dict | None:
    """The module run on the train batch's rows that the minibatch's NaN columns were computed
    from (the value function where it has one: what the learner connector's GAE calls), under
    :class:`FirstNonfinite`; what it found, with the train batch's row numbers."""
    import torch

    for mid, cols in upstream.items():
        rows = cols.pop("__row__", None)
        module = learner.module[mid]
        n = int(rows.shape[0]) if isinstance(rows, torch.Tensor) else None
        with torch.no_grad(), FirstNonfinite(names, n) as first:
            if callable(getattr(module, "compute_values", None)):
                module.compute_values(cols)
            else:
                module.forward_train(cols)
        if first.found is not None:
            if rows is not None:
                first.found["rows"] = [int(rows[i]) for i in first.found["rows"] if i < len(rows)]
            return {"module": mid, **first.found}
    return None


def _said(out: dict, bad_loss: dict, anomaly: dict | None, first: dict | None) -> str:
    """The story in one line: what is NaN, what came in so, where it was first made."""
    parts = [f"module {m!r}'s loss is {v}" for m, v in bad_loss.items()]
    parts += out["came_in"][:4]
    up = out.get("upstream")
    if up:
        parts.append(f"those columns were computed before the update from the train batch, where on rows {up['rows']} "
                     f"module {up['module']!r}'s {_made(up)}")
    if first:
        parts.append(f"in the update itself, {_made(first, rows=True)}")
    if anomaly:
        parts.append(f"the backward of {anomaly['backward']} returned NaN"
                     + (f" (its forward: {anomaly['forward_line']})" if anomaly.get("forward_line") else ""))
    return "; ".join(parts) or "all finite"


def _made(f: dict, rows: bool = False) -> str:
    where = f" in layer {f['layer']}" if f.get("layer") else " outside any layer (in the loss)"
    return (f"{f['op']}{where}" + (f" on batch rows {f['rows']}" if rows and f.get("rows") else "")
            + " made a NaN/inf from finite inputs" + (f" (largest |input| {f['inputs_max']:.3g})" if f.get("inputs_max") is not None
                                       else "") + (f", called from {f['frame']}" if f.get("frame") else ""))
