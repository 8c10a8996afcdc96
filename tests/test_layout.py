"""The package's shape: no import cycle between modules, and every import between packages points down the layers."""

import ast
from pathlib import Path

import networkx as nx

from precision_rl.paths import PACKAGE_DIR

# Bottom to top. A module may import from its own layer's package and from any layer below, never from above.
LAYERS = (
    ("errors", "paths", "fileio", "metrics", "console", "formats", "quantize", "logit_noise", "locks"),
    ("reward",),
    ("verl_ext",),
    ("config",),
    ("data",),
    ("tiny",),
    ("launch",),
    ("mismatch",),
    ("analysis",),
    ("cli",),
    ("__main__",),
)
LEVEL = {unit: level for level, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    """Return module -> imported module edges inside the package (lazy imports in functions included)."""
    modules = {module_name(p): p for p in PACKAGE_DIR.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("precision_rl"):
                targets = [f"{node.module}.{a.name}" for a in node.names]
                graph.add_edges_from((name, t if t in modules else node.module) for t in targets)
            elif isinstance(node, ast.Import):
                graph.add_edges_from((name, a.name) for a in node.names if a.name in modules)
    graph.remove_edges_from(nx.selfloop_edges(graph))
    return graph


def unit(module: str) -> str:
    """Return the layer unit of a module: its subpackage, or the top-level module's own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """Return the edges that import from another unit of the same layer or of a higher one (the base layer aside)."""
    def wrong(a: str, b: str) -> bool:
        ua, ub = unit(a), unit(b)
        if ua == ub or "__init__" in (ua, ub):
            return False
        return LEVEL[ua] <= LEVEL[ub] and not LEVEL[ua] == LEVEL[ub] == 0
    return [(a, b) for a, b in graph.edges if wrong(a, b)]


def test_no_module_imports_itself_back():
    graph = import_graph()
    assert len(graph) > 60
    assert list(nx.simple_cycles(graph)) == []


def test_every_import_points_down_the_layers():
    graph = import_graph()
    units = {unit(m) for m in graph} - {"__init__"}
    assert units <= set(LEVEL), f"modules outside the layer table: {sorted(units - set(LEVEL))}"
    assert upward_imports(graph) == []


def test_the_checks_see_a_cycle_and_an_upward_import():
    graph = import_graph()
    graph.add_edge("precision_rl.reward.grader", "precision_rl.analysis.logs")
    assert upward_imports(graph) == [("precision_rl.reward.grader", "precision_rl.analysis.logs")]
    graph.add_edge("precision_rl.analysis.logs", "precision_rl.analysis.checks")
    graph.add_edge("precision_rl.analysis.checks", "precision_rl.analysis.logs")
    assert list(nx.simple_cycles(graph)) != []
