"""What stands between the env and the loss, checked on a real EnvRunner: ``flow1 check
--config MODULE:FUNCTION`` (:func:`~flow1_ray.pipeline.api.check_config`) builds one EnvRunner
from the user's RLlib config, samples with its own connectors and RLModule while the tap
(:mod:`.tap`) records what the module saw and emitted, and judges that record with the
PIPELINE rules (:mod:`flow1_ray.checks.pipeline`). The config is read in a child process, under
the timeouts of ``flow1 check`` (:mod:`flow1_ray.envcheck.isolate`)."""
