"""The k8s/ manifests validate offline against KubeRay's CRD schemas (../shared/k8s-schemas)."""

from __future__ import annotations

import functools

from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT.parent / "shared" / "k8s-schemas"
KINDS = {"RayJob": "ray.io_rayjobs.yaml", "RayCluster": "ray.io_rayclusters.yaml"}
MANIFESTS = sorted((ROOT / "k8s").glob("*.yaml"))


@functools.lru_cache(maxsize=None)
def _schema(kind: str, version: str) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((SCHEMAS / KINDS[kind]).read_text(), Loader=loader)
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"]


@pytest.mark.skipif(not SCHEMAS.is_dir(), reason="../shared/k8s-schemas not beside the checkout")
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_against_crd(path):
    for doc in yaml.safe_load_all(path.read_text()):
        group, version = doc["apiVersion"].split("/")
        assert group == "ray.io" and doc["kind"] in KINDS
        jsonschema.Draft7Validator(_schema(doc["kind"], version)).validate(doc)


@pytest.mark.skipif(not SCHEMAS.is_dir(), reason="../shared/k8s-schemas not beside the checkout")
def test_validation_would_catch_a_typo():
    bad = yaml.safe_load((ROOT / "k8s" / "rayjob-flow1-check.yaml").read_text())
    bad["spec"]["shutdownAfterJobFinishes"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_schema("RayJob", "v1")).validate(bad)


def test_there_are_manifests():
    assert MANIFESTS
