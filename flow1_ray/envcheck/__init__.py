"""The offline env checker (``check_env``, ``flow1 check``): the API and its report
(api.py), one check of an env (judge.py), the drive of an env with random actions for a
budget of steps (drive.py, drive_single.py, drive_multi.py, and watch.py, what the drive tells
its watcher), the child process that isolates the env from flow1 (isolate.py, with board.py,
child.py, supervise.py, dumps.py and stop_findings.py) and the built-in faulty envs of
``--demo`` and ``flow1 train`` (demo.py). No Ray."""
