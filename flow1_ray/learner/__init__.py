"""What runs inside each Learner actor: per-layer gradient and activation tracing on the
Learner's own MetricsLogger (tracer.py) and what a traced update's batch says beyond its
gradients (batch_measures.py). The Learner's lock file is in flow1_ray.liveness.learner; the
rules that read the tracing run on the driver (flow1_ray.driver.learner_watch)."""
