"""What the clusters' thumbnails cost a runner: ``StateSampler.add`` + a send's payload on real
RLlib episodes of 84x84 RGB frames, and the time inside the frame sample (``FrameBank.offer``:
choosing rows, downscaling their frames) as its share, timed in place.

The runner-side work of the thumbnails (``clustering/frames.py``) is choosing the rows whose
frames a send carries and downscaling those; this measures it against the state sampling
it rides on (flattening, pooling, action indices), per ``add()`` of ``--steps`` steps, and a
send every ``--adds`` adds, as a runner does every ``state_send_interval_s``.

    python scripts/bench_state_frames.py [--rounds 7] [--steps 800] [--rate 0.25]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from gymnasium import spaces


def _episodes(steps: int, side: int, rng: np.random.Generator) -> tuple[spaces.Box, list]:
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    space = spaces.Box(0, 255, (side, side, 3), np.uint8)
    eps, per = [], 200
    for _ in range(max(1, steps // per)):
        frames = rng.integers(0, 256, (per + 1, side, side, 3), dtype=np.uint8)
        ep = SingleAgentEpisode(observations=list(frames), actions=[int(a) for a in rng.integers(0, 6, per)],
                                rewards=[0.0] * per, len_lookback_buffer=0, observation_space=space,
                                action_space=spaces.Discrete(6))
        eps.append(ep.to_numpy())
    return space, eps


FRAMES_S = [0.0]


def _timed_offer() -> None:
    """FrameBank.offer, its time added up in FRAMES_S (the frames' whole runner-side work)."""
    from flow1_ray.clustering.frames import FrameBank

    offer = FrameBank.offer

    def timed(self, n, make):
        t0 = time.perf_counter()
        try:
            return offer(self, n, make)
        finally:
            FRAMES_S[0] += time.perf_counter() - t0

    FrameBank.offer = timed


def _arm(space: spaces.Box, eps: list, rate: float, adds: int) -> tuple[float, float]:
    """(seconds per add(), of which in the frame sample), a send's payload every ``adds`` adds."""
    from flow1_ray.runner.sender import Sender
    from flow1_ray.runner.states import StateSampler

    sampler = StateSampler(space, spaces.Discrete(6), rate, Sender("bench/states", lambda: None, 1), seed=0)
    FRAMES_S[0] = 0.0
    t0 = time.perf_counter()
    for i in range(adds * 3):
        sampler.add(eps)
        if (i + 1) % adds == 0:
            sampler.batch()
            for st in sampler.streams.values():
                st.chunks = []
            sampler.buffered = 0
    n = adds * 3
    return (time.perf_counter() - t0) / n, FRAMES_S[0] / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--rate", type=float, default=0.25)
    p.add_argument("--adds", type=int, default=4, help="add() calls per send")
    p.add_argument("--side", type=int, default=84)
    args = p.parse_args()
    space, eps = _episodes(args.steps, args.side, np.random.default_rng(0))
    _timed_offer()
    _arm(space, eps, args.rate, args.adds)   # warm-up
    rounds = [_arm(space, eps, args.rate, args.adds) for _ in range(args.rounds)]
    add = statistics.median(r[0] for r in rounds)
    frames = statistics.median(r[1] for r in rounds)
    shares = sorted(r[1] / r[0] for r in rounds)
    print(f"{args.steps} steps of {args.side}x{args.side}x3 frames per add(), rate {args.rate}, a send every "
          f"{args.adds} adds, {args.rounds} rounds")
    print(f"add(): {add * 1e3:.2f} ms, of which the frame sample {frames * 1e3:.3f} ms "
          f"({statistics.median(shares):.1%}, rounds {shares[0]:.1%}-{shares[-1]:.1%}): "
          f"{frames * 1e6 / args.steps:.2f} us a step")


if __name__ == "__main__":
    main()
