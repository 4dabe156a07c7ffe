"""flow1's series on Ray's Prometheus endpoint during a real local run, and the alert rules
and dashboard that read them name only series flow1 exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from flow1_ray.hub.prometheus import SERIES

ROOT = Path(__file__).resolve().parents[2]


def _exprs() -> list[str]:
    rule = yaml.safe_load((ROOT / "k8s" / "monitoring" / "prometheusrule.yaml").read_text())
    out = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    dash = json.loads((ROOT / "configs" / "grafana-flow1.json").read_text())
    out += [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    return out


def test_alerts_and_dashboard_read_only_series_flow1_exports():
    names = set()
    for expr in _exprs():
        names |= set(re.findall(r"\bray_flow1_\w+", expr))
    assert names and names <= set(SERIES.values()), names - set(SERIES.values())
    assert set(SERIES.values()) <= names, "every series has a panel or a rule"
