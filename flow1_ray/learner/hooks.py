"""The forward hooks of one traced update: installed on a Learner's RLModules just before
the update and removed right after it (:class:`~flow1_ray.learner.tracer.LearnerTracer`
arms and disarms them). They record each activation layer's mean |activation| per unit (the
dormant-neuron measure) and the share of a saturating activation's outputs at its bounds,
whether the loss's gradient reaches each parameter layer's output, and alias the inputs of
the policy and value heads so that each head's gradient into a shared trunk is seen on its
own. Each hook times itself into ``spent_s`` and never raises into RLlib.
"""

from __future__ import annotations

import time
from typing import Any

#: activation modules whose outputs are the "units" of the dormant-neuron measure
ACTIVATIONS = ("ReLU", "Tanh", "ELU", "LeakyReLU", "SiLU", "GELU", "Sigmoid", "Softplus", "Mish", "SELU",
                "CELU", "Hardtanh", "ReLU6", "PReLU", "Swish")
#: activations whose gradient is exactly 0 where they saturate (float32 tanh is +-1 past |x| ~ 9):
#: the share of their outputs there, named by the parameter layer that feeds them
SATURATING = {"Tanh": lambda h: h.abs() >= 1.0, "Sigmoid": lambda h: (h <= 0.0) | (h >= 1.0),
               "Hardtanh": lambda h: h.abs() >= 1.0}


class ForwardHooks:
    """The hooks' half of the tracer: the state they fill (``acts``, ``saturated``, ``reach``,
    ``head_grads``, ``hooks``, ``spent_s``) is the tracer's own."""

    def _arm(self) -> None:
        """Forward hooks for the next update: activation statistics and head-input aliases."""
        import torch.nn as nn

        self.acts, self.head_grads, self.reach, self.clipped, self.importance = {}, {}, {}, {}, {}
        self.saturated = {}
        for mid, m in self._modules().items():
            if not isinstance(m, nn.Module):
                continue
            feeding = None   # the last parameter layer in module order: what feeds the next activation
            for name, sub in m.named_modules():
                kind = type(sub).__name__
                if kind in ACTIVATIONS:
                    self.hooks.append(sub.register_forward_hook(self._act_hook(mid, name, feeding, kind)))
                    feeding = None
                elif name and next(sub.parameters(recurse=False), None) is not None:
                    self.hooks.append(sub.register_forward_hook(self._reach_hook(mid, name)))
                    feeding = name
            for head in ("pi", "vf"):
                sub = getattr(m, head, None)
                if isinstance(sub, nn.Module):
                    self.hooks.append(sub.register_forward_pre_hook(self._head_hook(mid, head)))
        self.trace_now = True

    def _disarm(self) -> None:
        for h in self.hooks:
            try:
                h.remove()
            except Exception:
                pass
        self.hooks = []
        self.trace_now = False

    def _act_hook(self, mid: str, layer: str, feeding: str | None = None, kind: str = ""):
        saturates = SATURATING.get(kind) if feeding is not None else None

        def hook(module: Any, inputs: Any, output: Any) -> None:
            t0 = time.perf_counter()
            try:
                h = output.detach()
                if saturates is not None:   # [outputs where the activation passes back exactly 0, outputs]
                    sat = self.saturated.setdefault((mid, feeding), [0, 0])
                    sat[0], sat[1] = sat[0] + saturates(h).sum(), sat[1] + h.numel()
                if h.dim() < 2:
                    return
                unit = 1 if h.dim() == 4 else h.dim() - 1   # conv channels, else the last axis
                dims = [d for d in range(h.dim()) if d != unit]
                per_unit = h.abs().mean(dim=dims)
                rows = h.numel() // max(1, per_unit.numel())
                acc = self.acts.get((mid, layer))
                if acc is None:
                    self.acts[(mid, layer)] = [per_unit * rows, rows]
                else:
                    acc[0] = acc[0] + per_unit * rows
                    acc[1] += rows
            except Exception:
                pass
            self.spent_s += time.perf_counter() - t0
        return hook

    def _reach_hook(self, mid: str, layer: str):
        """On a layer's output that takes part in autograd: note that it was used, and the
        largest |gradient| that reaches it (kept as a tensor: one reduction at trace time)."""
        def hook(module: Any, inputs: Any, output: Any) -> None:
            t0 = time.perf_counter()
            try:
                if not getattr(output, "requires_grad", False) or not hasattr(output, "register_hook"):
                    return
                got = self.reach.setdefault((mid, layer), [])

                def grab(g: Any) -> None:
                    got.append(g.detach().abs().amax())
                output.register_hook(grab)
            except Exception:
                pass
            self.spent_s += time.perf_counter() - t0
        return hook

    def _head_hook(self, mid: str, head: str):
        def pre(module: Any, args: tuple) -> tuple | None:
            t0 = time.perf_counter()
            try:
                x = args[0] if args else None
                if x is None or not getattr(x, "requires_grad", False):
                    return None
                y = x.view_as(x)

                def grab(g: Any) -> None:
                    t1 = time.perf_counter()
                    self.head_grads[(mid, head)] = self.head_grads.get((mid, head), 0.0) + float(g.detach().norm())
                    self.spent_s += time.perf_counter() - t1
                y.register_hook(grab)
                return (y,) + tuple(args[1:])
            except Exception:
                return None
            finally:
                self.spent_s += time.perf_counter() - t0
        return pre
