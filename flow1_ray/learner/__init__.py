"""What runs inside each Learner actor: per-layer gradient and activation tracing on the
Learner's own MetricsLogger (tracer.py) and the Learner's lock file (liveness.py). The rules
that read them run on the driver (flow1_ray.driver.learner_watch). See docs/architecture.md."""
