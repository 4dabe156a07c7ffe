"""k8s/ renders and validates offline: every kustomize overlay through `kubectl kustomize`,
KubeRay's objects against its CRD schemas (../shared/k8s-schemas), their pod templates and
every standard object against Kubernetes' own schemas (kubernetes-validate), and what flow1
needs of the pods (a node-local lock directory, the shared run directory, the metrics port,
the GPU overlay's GPUs)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
SCHEMAS = ROOT.parent / "shared" / "k8s-schemas"
KINDS = {"RayJob": "ray.io_rayjobs.yaml", "RayCluster": "ray.io_rayclusters.yaml"}
TARGETS = ["base", "overlays/cpu-smoke", "overlays/gpu", "monitoring"]
K8S_VERSION = "1.32"
KUBECTL = shutil.which("kubectl")
no_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed")
no_schemas = pytest.mark.skipif(not SCHEMAS.is_dir(), reason="../shared/k8s-schemas not beside the checkout")


@functools.lru_cache(maxsize=None)
def _schema(kind: str, version: str) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((SCHEMAS / KINDS[kind]).read_text(), Loader=loader)
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"]


@functools.lru_cache(maxsize=None)
def _render(target: str) -> tuple:
    out = subprocess.run([KUBECTL, "kustomize", str(K8S / target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def _pod_templates(doc: dict) -> list[tuple[str, dict]]:
    spec = doc["spec"].get("rayClusterSpec", doc["spec"]) if doc["kind"] == "RayJob" else doc["spec"]
    groups = [("head", spec["headGroupSpec"])] + [(g["groupName"], g) for g in spec.get("workerGroupSpecs", [])]
    return [(name, g["template"]) for name, g in groups]


@no_kubectl
@no_schemas
@pytest.mark.parametrize("target", TARGETS)
def test_every_kuberay_object_validates_against_its_crd(target):
    docs = [d for d in _render(target) if d["apiVersion"].startswith("ray.io/")]
    for doc in docs:
        version = doc["apiVersion"].split("/")[1]
        jsonschema.Draft7Validator(_schema(doc["kind"], version)).validate(doc)
    assert docs or target == "monitoring"


@no_kubectl
@pytest.mark.parametrize("target", ["base", "overlays/cpu-smoke", "overlays/gpu"])
def test_standard_objects_and_pod_templates_validate_against_kubernetes(target):
    """Every pod template of the RayJobs and every standard object validates strictly against
    Kubernetes' schemas of K8S_VERSION (kv.validate raises otherwise). The monitoring target
    holds only the Prometheus Operator's objects, which have no schema there: they are checked
    against flow1's metrics below."""
    kv = pytest.importorskip("kubernetes_validate")
    validated: dict[str, str] = {}   # "Kind name" -> the schema version it validated against
    for doc in _render(target):
        if doc["apiVersion"].startswith("ray.io/"):
            for name, template in _pod_templates(doc):
                pod = {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": f"{doc['metadata']['name']}-{name}", **template.get("metadata", {})},
                       "spec": template["spec"]}
                validated[f"Pod {pod['metadata']['name']}"] = kv.validate(pod, K8S_VERSION, strict=True)
        else:
            validated[f"{doc['kind']} {doc['metadata']['name']}"] = kv.validate(doc, K8S_VERSION, strict=True)
    assert {"Pod flow1-train-head", "Pod flow1-check-head", "PersistentVolumeClaim flow1-runs"} <= set(validated), \
        sorted(validated)
    assert any(k.startswith("Pod flow1-train-") and not k.endswith("-head") for k in validated), "a worker group"
    assert set(validated.values()) == {K8S_VERSION}, validated  # not an older schema it fell back to


@no_kubectl
@pytest.mark.parametrize("target", ["base", "overlays/cpu-smoke", "overlays/gpu"])
def test_every_ray_pod_has_a_node_local_lock_dir_the_run_volume_and_the_metrics_port(target):
    docs = _render(target)
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    jobs = [d for d in docs if d["kind"] == "RayJob"]
    assert {j["metadata"]["name"] for j in jobs} >= {"flow1-train", "flow1-check"}
    for job in jobs:
        for name, template in _pod_templates(job):
            spec = template["spec"]
            (c,) = [c for c in spec["containers"] if c["name"].startswith("ray-")]
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            if job["metadata"]["name"] == "flow1-check":
                continue  # the pre-flight check runs no EnvRunner
            volumes = {v["name"]: v for v in spec["volumes"]}
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            # one emptyDir per pod = per Ray node: lock files must be node-local (k8s/README.md)
            assert "emptyDir" in volumes[mounts[env["FLOW1_LOCK_DIR"]]], (name, volumes)
            run_volume = volumes[mounts[env["FLOW1_OUTPUT_DIR"]]]
            assert run_volume["persistentVolumeClaim"]["claimName"] in claims
            assert {"containerPort": 8080, "name": "metrics"} in c["ports"]
            assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "flow1-ray"


@no_kubectl
def test_the_gpu_overlay_requests_and_limits_gpus_tolerates_the_taint_and_selects_gpu_nodes():
    (job,) = [d for d in _render("overlays/gpu") if d["metadata"]["name"] == "flow1-train"]
    gpu = [(n, t) for n, t in _pod_templates(job) if n == "gpu"]
    assert gpu, "a GPU worker group"
    spec = gpu[0][1]["spec"]
    (c,) = spec["containers"]
    assert c["resources"]["requests"]["nvidia.com/gpu"] == c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["nodeSelector"]
    # the Learner takes part of a GPU, leaving a share for flow1's StateClusterer on that node
    assert "--learner-gpus 0.5" in job["spec"]["entrypoint"]
    (smoke,) = [d for d in _render("overlays/cpu-smoke") if d["metadata"]["name"] == "flow1-train"]
    cpu_only = [t for n, t in _pod_templates(smoke) if n != "head"]
    assert cpu_only and all("nvidia.com/gpu" not in str(t) for t in cpu_only)


@no_kubectl
def test_monitoring_scrapes_the_ray_pods_and_alerts_on_flow1s_series():
    docs = {d["kind"]: d for d in _render("monitoring")}
    pm, rule = docs["PodMonitor"], docs["PrometheusRule"]
    assert pm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "flow1-ray"}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    exprs = " ".join(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"])
    for series in ('ray_flow1_workers{state="dead"}', 'ray_flow1_workers{state="stalled"}',
                   'ray_flow1_events_total{status="FAIL"}'):
        assert series in exprs


@no_schemas
def test_validation_would_catch_a_typo():
    bad = yaml.safe_load((K8S / "base" / "rayjob-flow1-check.yaml").read_text())
    bad["spec"]["shutdownAfterJobFinishes"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_schema("RayJob", "v1")).validate(bad)


@no_kubectl
def test_kubernetes_validation_would_catch_a_misspelled_field():
    kv = pytest.importorskip("kubernetes_validate")
    (job,) = [d for d in _render("overlays/gpu") if d["metadata"]["name"] == "flow1-train"]
    spec = dict(_pod_templates(job)[-1][1]["spec"])
    spec["toleration"] = spec.pop("tolerations")
    with pytest.raises(kv.ValidationError, match="toleration"):
        kv.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": spec}, K8S_VERSION,
                    strict=True)


def test_the_image_sets_flow1s_directories():
    text = (K8S / "Dockerfile").read_text()
    assert "FLOW1_LOCK_DIR=/flow1-locks" in text and "FLOW1_OUTPUT_DIR=/flow1-runs" in text
    assert 'ray[rllib,default]==2.60.0' in text
