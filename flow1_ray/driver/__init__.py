"""What runs in the Algorithm's process (the driver): the handle on the run's actors
(run.py), the learner curves judged each iteration (learner_watch.py), the live what-if
(live_whatif.py), the replay buffer's footprint (replay_footprint.py) and the watchdog of
build, train() and stop() (watchdog.py). RLlib's hooks enter through flow1_ray.callbacks."""
