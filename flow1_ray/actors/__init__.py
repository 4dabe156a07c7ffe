"""The Ray actors flow1 starts beside a run: the hub (hub.py: the Recorder, the monitor,
its node's probe and, on CPU, the state clusterer as threads of one process), a probe on
every other node (probe.py), a state clusterer of its own when it has a GPU share
(clusterer.py); the Prometheus series the hub exports (prometheus.py). See
docs/architecture.md."""
