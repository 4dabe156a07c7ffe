"""flow1 whatif on a multi-node Ray cluster (``ray.cluster_utils.Cluster``: a head without
CPUs and two worker nodes of 1 CPU on this machine), run as its own process: the branch runs
spread over the worker nodes. Prints one JSON object.

    python tests/jobs/whatif_multinode_job.py OUTPUT_DIR
"""

import json
import os
import sys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402


def main(out_dir: str) -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "object_store_memory": 80 * 1024**2})
    nodes = [cluster.add_node(num_cpus=1, object_store_memory=80 * 1024**2) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        from ray.rllib.algorithms.ppo import PPOConfig

        from flow1_ray.whatif.run import run_whatif

        algo = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0).debugging(seed=0)
                .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1)).build_algo()
        algo.train()
        checkpoint = os.path.join(out_dir, "ck")
        algo.save_to_path(checkpoint)
        algo.stop()
        o = run_whatif(checkpoint, sets=["lr=0.001"], seeds=2, iterations=1, parallel=4)
        return {"worker_nodes": sorted(n.node_id for n in nodes), "head_node": cluster.head_node.node_id,
                "branch_nodes": sorted({r.node for r in o.results}), "failed": [r.error for r in o.failed()],
                "queued": o.queued, "runs": len(o.results)}
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])), flush=True)
