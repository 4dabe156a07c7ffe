"""What runs in the hub and the node probes: the Ray actors flow1 starts beside a run.

The hub (hub.py) is one actor holding the Recorder (recorder.py: the run directory's single
writer), the heartbeat monitor (monitor.py, with nodes.py for nodes that are gone and
exits.py for Ray's exit detail of a death), its own node's probe and, on CPU, the state
clusterer (clusterer.py, with a ClustererCore of clusterer_core.py per RLModule, and
heatmaps.py) as threads of one process; every other node runs a probe (probe.py, its
scanner in lockscan.py) that reads the lock files of its node. The Prometheus series the hub
exports are in prometheus.py; priority.py lets this background work yield the CPU to the
run it watches. See the design pages of the docs site.
"""
