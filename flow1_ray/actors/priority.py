"""Background work of flow1 yields the CPU to the run it watches.

Clustering and heatmap rendering run on their own threads under Linux's SCHED_IDLE policy
(or, where that is refused, at nice +10): such a thread runs when a core would otherwise
idle -- while the learner updates, between samples -- and under contention the kernel gives
it a sliver (CFS weight 3 against 1024 for a normal thread; nice +10 is 110), so on a busy
node the EnvRunners and Learners get the cores first. The policy applies to the calling
thread only, so the request threads of the same actor keep their normal priority. A node
saturated for good delays the heatmaps; their bounded queue then drops and counts them.
"""

from __future__ import annotations

import os

BACKGROUND_NICE = 10


def lower_this_thread() -> str:
    """Put the calling thread in the background; returns the policy it got ("" if none)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        pass
    try:
        os.nice(BACKGROUND_NICE)
        return f"nice +{BACKGROUND_NICE}"
    except (AttributeError, OSError):
        return ""
