"""State clustering without Ray: KMeans backends and the state-cluster x action map."""

from .backends import BACKENDS, make_backend, resolve_backend
from .state_action_map import StateActionMap, analyze_state_actions

__all__ = ["BACKENDS", "StateActionMap", "analyze_state_actions", "make_backend", "resolve_backend"]
