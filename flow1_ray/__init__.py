"""flow1_ray: why an RLlib run trains but does not learn, and which workers died or hung.

``check_env`` judges an env's contracts on every step of a rollout without training;
``load_events`` reads a run directory's findings back as an Arrow table.
"""

from .checks.thresholds import Thresholds
from .envcheck import check_env
from .errors import Flow1InputError
from .events import EVENT_SCHEMA, Event
from .report import Report
from .store import load_events, load_metrics

__version__ = "0.1.0"

__all__ = [
    "EVENT_SCHEMA", "Event", "Flow1InputError", "Report", "Thresholds", "check_env",
    "load_events", "load_metrics", "__version__",
]
