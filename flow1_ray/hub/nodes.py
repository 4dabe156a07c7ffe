"""Nodes that are gone, told as soon as two independent signals agree.

Ray declares a node dead when its raylet misses health checks: at once when the node is
removed gracefully, ~14 s later when it is not (a preempted VM, a kernel panic, a killed
raylet: measured on ``ray.cluster_utils.Cluster.remove_node(node, allow_graceful=False)``).
flow1 knows sooner: the node's probe reports at least every ``heartbeat_interval_s``, so a
probe silent for twice that is the first signal; the second is the node's raylet itself,
whose port stops accepting connections when its process is gone (refused) or its machine
is (timed out). A busy node still accepts a connection (the kernel answers), so load alone
never makes a node look lost. Ray's own verdict comes later and confirms it with the node id.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

#: the raylet's port is tried with this timeout (a dead machine answers nothing)
CONNECT_TIMEOUT_S = 0.5
#: the least silence that counts, whatever the heartbeat interval (start-up jitter)
MIN_SILENCE_S = 1.5


@dataclass
class NodeWatch:
    """Probe reports and raylet addresses per node; which nodes look lost."""

    heartbeat_interval_s: float
    last_report: dict[str, float] = field(default_factory=dict)     # node id -> monotonic time
    addresses: dict[str, tuple[str, int]] = field(default_factory=dict)
    suspected: dict[str, dict] = field(default_factory=dict)         # node id -> what NODE_LOST said

    @property
    def silence_s(self) -> float:
        return max(MIN_SILENCE_S, 2.0 * self.heartbeat_interval_s)

    def reported(self, node_id: str, now: float | None = None) -> bool:
        """A probe report arrived; True when that node was suspected (it answers again)."""
        self.last_report[node_id] = time.monotonic() if now is None else now
        return self.suspected.pop(node_id, None) is not None

    def learn(self, nodes: list[dict]) -> None:
        """Raylet addresses from ``ray.nodes()``."""
        for n in nodes:
            host, port = n.get("NodeManagerAddress"), n.get("NodeManagerPort")
            if host and port:
                self.addresses[n["NodeID"]] = (str(host), int(port))

    def forget(self, node_id: str) -> None:
        for d in (self.last_report, self.addresses, self.suspected):
            d.pop(node_id, None)

    def silent(self, node_ids: list[str], now: float | None = None) -> list[tuple[str, float]]:
        """Nodes among ``node_ids`` whose probe reported once and has been silent for
        :attr:`silence_s` or longer, not yet suspected; with their silence."""
        now = time.monotonic() if now is None else now
        out = []
        for nid in node_ids:
            last = self.last_report.get(nid)
            if last is not None and nid not in self.suspected and now - last >= self.silence_s:
                out.append((nid, now - last))
        return out

    def raylet_unreachable(self, node_id: str) -> str | None:
        """Why the node's raylet cannot be reached (refused, timed out), or None when it
        accepts a connection (or its address is unknown: then nothing is claimed)."""
        addr = self.addresses.get(node_id)
        if addr is None:
            return None
        try:
            with socket.create_connection(addr, timeout=CONNECT_TIMEOUT_S):
                return None
        except ConnectionRefusedError:
            return f"its raylet at {addr[0]}:{addr[1]} refuses connections (its process is gone)"
        except (socket.timeout, TimeoutError):
            return (f"its raylet at {addr[0]}:{addr[1]} did not answer within {CONNECT_TIMEOUT_S:g} s "
                    f"(the machine is gone or cut off)")
        except OSError as e:
            return f"its raylet at {addr[0]}:{addr[1]} is unreachable ({e.strerror or e})"


def memory_of(summaries: list[dict]) -> dict:
    """The EnvRunners' resident memory (sum of the last RSS each wrote into its lock file, MB)
    and the fullest node's memory use (%), from the probes' last summaries."""
    rss = [w["rss"] for s in summaries for w in s.get("workers", [])
           if w.get("rss") and w.get("role", "env_runner") == "env_runner"]
    node = [s["load"]["mem_usage_percent"] for s in summaries if s.get("load", {}).get("mem_usage_percent") is not None]
    out: dict = {}
    if rss:
        out["runners_rss_mb"] = round(sum(rss) / 1e6, 1)
    if node:
        out["node_percent"] = max(node)
    return out
