"""The offline env checker (``check_env``, ``flow1 check``): the API and its report
(api.py), the drive of an env with random actions for a budget of steps (drive.py), the
child process that isolates the env from flow1 (isolate.py) and the built-in faulty envs of
``--demo`` and ``flow1 train`` (demo.py). No Ray."""
