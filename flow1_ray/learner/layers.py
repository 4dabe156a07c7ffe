"""The names of a Learner's RLModules and layers, as the tracing and the learner/ table use them."""

from __future__ import annotations

from typing import Any

from ..common.schema import DEFAULT_MODULE_ID
from .hooks import ACTIVATIONS


def _layer_of(param_name: str) -> str:
    """``encoder.actor_encoder.net.mlp.0.weight`` -> ``encoder.actor_encoder.net.mlp.0``."""
    head, _, last = param_name.rpartition(".")
    return head if head and last in ("weight", "bias") else param_name


def modules_of(learner: Any) -> dict[str, Any]:
    """The Learner's RLModules by module id (a MultiRLModule's, or the one module)."""
    module = learner.module
    try:
        return {mid: module[mid] for mid in module.keys()}
    except Exception:
        return {DEFAULT_MODULE_ID: module}


def layer_order(learner: Any) -> dict[str, list[str]]:
    """Each module's layers in network order, as the learner/ table names them: a layer with
    parameters by :func:`_layer_of` of its parameter names, an activation layer by its module
    name, in the order of ``named_modules`` (the order ``named_parameters`` gives too). The
    trace itself cannot carry it: its per-layer numbers reach the driver as a dict that
    RLlib's result merging reorders (two runs of one PPO model gave two orders)."""
    out: dict[str, list[str]] = {}
    for mid, m in modules_of(learner).items():
        names: dict[str, None] = {}
        try:
            for name, sub in m.named_modules():
                for pname, _ in sub.named_parameters(recurse=False):
                    names.setdefault(_layer_of(f"{name}.{pname}" if name else pname))
                if type(sub).__name__ in ACTIVATIONS:
                    names.setdefault(name)
        except Exception:   # not a torch module: its rows keep no index
            continue
        out[str(mid)] = list(names)
    return out
