"""The package's import graph: no circle among flow1_ray's modules and no import from a lower
layer to a higher one. Imports written inside functions count as much as module-level ones (a
circle held together by a late import is still a circle), and so does an import that only
happens through its package's ``__init__``. The layer order is written here and nowhere else;
the docs' design page shows this list.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "flow1_ray"

#: flow1_ray's top-level packages and modules, lowest first: a module may import its own
#: layer and the layers before it, never one after it.
LAYERS = (
    "common",      # codes, events, schema, names, errors, iteration: imports nothing else of flow1
    "checks",      # pure judgements and the rule catalogue: no Ray, no env stepping
    "clustering",  # KMeans engines, state features, the state x action maps
    "rundir",      # the run directory written and read back as untrusted input
    "liveness",    # the lock files of EnvRunners and Learners, and their directory
    "diagnosis",   # a run's findings read as one diagnosis: primary symptom, causes, the change
    "report",      # a run's report: Markdown, JSON, HTML, the live panel
    "envcheck",    # the offline env checker (check_env, flow1 check)
    "pipeline",    # what the RLModule sees and emits: flow1 check --config, its EnvRunner and tap
    "whatif",      # what-if branches of a run
    "replay",      # flow1 replay: a flight-recorder dump played again
    "options",     # Flow1Callbacks' options
    "learner",     # what runs inside each Learner actor
    "runner",      # what runs inside each EnvRunner
    "hub",         # the hub and the node probes (Ray actors beside the run)
    "driver",      # what runs in the Algorithm's process
    "callbacks",   # RLlib's hooks, handing over to the above
    "cli",         # the flow1 command
    "__main__",
)


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _catalogue_edges(root: Path, name: str) -> set[str]:
    """The rule modules the catalogue imports by name (``RULE_MODULES``, relative to its package)."""
    tree = ast.parse((root / "checks" / "catalogue.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "RULE_MODULES" for t in node.targets):
            return {f"{name}.checks{ast.literal_eval(e)}" for e in node.value.elts}
    raise AssertionError("checks/catalogue.py has no RULE_MODULES")


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the flow1_ray modules it imports (at module level or in a function, directly or
    through a package's ``__init__``). The root package (a lazy facade) is left out."""
    name = root.name
    mods = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods if m != name}
    for mod, path in mods.items():
        if mod == name:
            continue
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base_name = ".".join(base + ([node.module] if node.module else []))
                else:
                    base_name = node.module or ""
                targets = [base_name] + [f"{base_name}.{a.name}" for a in node.names]
            for t in targets:
                if t in mods:
                    parts = t.split(".")
                    # importing a.b.c runs the __init__ of a.b too (the root's is a lazy facade)
                    graph[mod].update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
        graph[mod].discard(mod)
    graph[f"{name}.checks.catalogue"] |= _catalogue_edges(root, name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _layer(mod: str) -> str:
    return mod.split(".")[1]


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a layer to a later one, as "a -> b (layer x imports layer y)"."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    out = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            la, lb = _layer(a), _layer(b)
            if rank[lb] > rank[la]:
                out.append(f"{a} -> {b} ({la} imports {lb}, a later layer)")
    return out


def test_every_top_level_name_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    assert names == set(LAYERS), f"not in LAYERS: {sorted(names - set(LAYERS))}; gone: {sorted(set(LAYERS) - names)}"


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_nothing_imports_a_later_layer():
    assert upward(import_graph()) == []


def test_common_imports_nothing_of_flow1_but_itself():
    graph = import_graph()
    outside = {f"{a} -> {b}" for a, bs in graph.items() if _layer(a) == "common" for b in bs if _layer(b) != "common"}
    assert not outside


def test_the_root_package_imports_nothing_eagerly():
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    eager = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert eager == ["from importlib import import_module"]


def test_a_planted_circle_and_a_planted_upward_import_are_found(tmp_path):
    root = tmp_path / "flow1_ray"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    # an import inside a function, from the lowest layer to the catalogue (which imports every
    # rule module, which import the events of common): a circle and an arrow running up
    events = root / "common" / "events.py"
    events.write_text(events.read_text() + "\n\ndef _planted():\n    from ..checks.catalogue import rule\n")
    graph = import_graph(root)
    found = circles(graph)
    assert any("flow1_ray.common.events" in c and "flow1_ray.checks.catalogue" in c for c in found), found
    assert "flow1_ray.common.events -> flow1_ray.checks.catalogue (common imports checks, a later layer)" \
        in upward(graph)
    # two modules of one layer importing each other: a circle with no arrow running up
    (root / "rundir" / "store.py").write_text((root / "rundir" / "store.py").read_text()
                                              + "\nfrom .reading import read_table  # noqa\n")
    assert ["flow1_ray.rundir.reading", "flow1_ray.rundir.store"] in circles(import_graph(root))
