"""Pure checks over arrays and dicts: no Ray, no RLlib, no env stepping.

The same functions judge ``flow1 check``, live EnvRunner samples and offline runs.
"""
