"""What the drive tells whoever watches it: :class:`Watch` (the hooks before and after each
env call, the name, the start and the end of the check) and :data:`NO_WATCH`, the in-process
check's watch, which does nothing. Used by the drivers (:mod:`flow1_ray.envcheck.drive`),
:func:`flow1_ray.envcheck.judge.drive` and the isolated check's child
(:mod:`flow1_ray.envcheck.child`), whose watch reports to the supervising parent.
"""

from __future__ import annotations

from typing import Any

from ..checks.findings import Finding


class Watch:
    """What the drive tells whoever watches it; this base, the in-process check, does nothing.

    An isolated check (:mod:`flow1_ray.envcheck.isolate`) runs the drive in a child process
    whose watch (:mod:`flow1_ray.envcheck.child`) writes the env call in progress to memory
    its parent reads (so a timeout or a death names the call and the step) and sends the
    findings to the parent as they are made (so a crash or a hang loses none of them). The
    hooks cost a few attribute writes per step.
    """

    #: set (by a signal handler) when the run must stop at the next step boundary
    stop_requested = False

    def enter(self, call: str, steps: int, episodes: int) -> None:
        """Before ``call`` ("import", "make", "reset", "step", "close"), after ``steps``
        judged steps and ``episodes`` ended episodes. Every finding made so far must reach
        the watcher before the env runs again; a stop asked for is taken here, between two
        env calls, where the checker is never half-way through a step."""

    def leave(self) -> None:
        """The env call returned (or raised): flow1's own checks run until the next one."""

    def named(self, name: str, env: Any) -> None:
        """The target resolved to ``name``; ``env`` is the instance once made (else None)."""

    def started(self, findings: list[Finding], driver: Any) -> None:
        """The drive begins: ``findings`` so far (spaces, gym alias), the driver and its checker."""

    def done(self, findings: list[Finding], summary: dict) -> None:
        """Everything is judged; the env is closed after this."""


NO_WATCH = Watch()
