"""Background work of flow1 yields the CPU to the run it watches.

Clustering and heatmap rendering run on their own threads at nice +10: under contention
the kernel gives such a thread about a tenth of a normal thread's share (CFS weight 110
against 1024), so on a busy node the EnvRunners and Learners get the cores first. On Linux
``nice`` applies to the calling thread only, so the request threads of the same actor
keep their normal priority.

Not SCHED_IDLE, on purpose: these threads share their process's GIL with its request
thread, and a thread that holds the GIL must be scheduled to hand it over. A SCHED_IDLE
thread (weight 3) on a saturated node can wait long enough for that to stall the actor's
requests behind it -- the rendering would be back on the request path, by priority
inversion. At nice +10 the hand-over still comes within the scheduler's latency.
"""

from __future__ import annotations

import os

BACKGROUND_NICE = 10


def lower_this_thread(increment: int = BACKGROUND_NICE) -> str:
    """Raise the calling thread's nice value; returns what it got ("" where refused)."""
    try:
        os.nice(increment)
        return f"nice +{increment}"
    except (AttributeError, OSError):
        return ""
