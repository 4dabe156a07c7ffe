"""What the EnvRunners, the Learners, the node probes and the driver watchdog agree on about
liveness: the lock file's format and its reading (lockfile.py), the holder that keeps it and
writes the heartbeat in place (holder.py), the
private directory of a node's lock files (lockdir.py) and the Learners' use of the same
mechanism (learner.py). POSIX record locks (fcntl), not flock: a record lock is released by
the kernel when its holder dies, whatever killed it, and is visible to a reader that does not
hold the file open (see the design pages of the docs site)."""
