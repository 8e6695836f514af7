"""Who may import whom: the folder boundaries of docs/lifecycle.md, read from the code.

Every ``import`` statement counts, at any depth (a lazy import inside a function
is still a dependency), unless a rule says "top level".
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

#: bench/ modules that may import server/ and SGLang: they time the server's
#: SGLang seams against SGLang's own classes, in one process, or (plugin_overhead)
#: launch stock SGLang with exactly the argv and environment the server builds.
SEAM_BENCHMARKS = {"bench/scripts/order_overhead.py", "bench/scripts/cache_overhead.py",
                   "bench/scripts/plugin_overhead.py"}
#: bench/ modules that may import SGLang: the live replay times requests with
#: SGLang's own benchmark client (``sglang.benchmark.serving``), and the peer
#: driver runs SGLang's own load generator's command-line entry.
SGLANG_CLIENTS = {"bench/live/client.py", "bench/live/peer_driver.py"}


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Top-level package names ``path`` imports (absolute imports only)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def offenders(folder: str, banned: set[str], allowed: frozenset[str] = frozenset(),
              top_level_only: bool = False) -> list[str]:
    return [f"{rel(p)} imports {sorted(imports(p, top_level_only) & banned)}"
            for p in modules(folder)
            if rel(p) not in allowed and imports(p, top_level_only) & banned]


def test_policies_are_pure():
    assert not offenders("policies", {"torch", "sglang", "compose", "server", "bench", "radix",
                                      "hydra", "omegaconf", "time", "os", "random"})


def test_compose_imports_neither_host():
    assert not offenders("compose", {"server", "bench", "sglang"})
    # NOTE: the model cache converts with torch/transformers, imported lazily
    assert not offenders("compose", {"torch", "transformers"}, top_level_only=True)


def test_bench_never_imports_server_but_the_seam_benchmarks():
    assert not offenders("bench", {"server"}, allowed=frozenset(SEAM_BENCHMARKS))


def test_sglang_is_imported_only_by_its_glue():
    for folder in ("policies", "compose", "bench", "kernels"):
        assert not offenders(folder, {"sglang", "sgl_kernel"},
                             allowed=frozenset(SEAM_BENCHMARKS | SGLANG_CLIENTS)), folder
    outside_glue = [p for p in modules("server") if not rel(p).startswith("server/sglang/")]
    assert not [rel(p) for p in outside_glue if imports(p) & {"sglang", "sgl_kernel"}]


def test_the_simulator_does_not_import_the_live_harness():
    bad = []
    for p in modules("bench/sim"):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{rel(p)}: {n}" for n in names if n.startswith("bench.live")]
    assert not bad


def test_the_gap_tree_is_pure():
    assert modules("radix")
    assert not offenders("radix", {"torch", "sglang", "numpy", "compose", "server", "bench"})


# ------------------------------------------------------------------ import circles

#: The project's own packages (what an import circle is counted over).
PACKAGES = ("bench", "compose", "deploy", "kernels", "policies", "radix", "server")


def module_name(path: Path) -> str:
    """``radix/tree.py`` -> ``radix.tree``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, at any depth (lazy and ``TYPE_CHECKING``
    imports included: each is still a dependency a reader must follow).

    ``from a.b import c`` names the module ``a.b.c`` where it exists, else ``a.b``
    (the nearest enclosing module that exists); relative imports are resolved."""
    known = {module_name(p): p for pkg in PACKAGES for p in modules(pkg)}

    def nearest(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in known.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        found: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(nearest(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])]) \
                    if node.level else node.module or ""
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else nearest(base)
                             for a in node.names)
        graph[mod] = {m for m in found if m is not None and m != mod}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_reaches_itself_through_its_imports():
    graph = module_graph()
    assert {"radix.tree", "radix.kv", "server.sglang.scheduling.state"} <= set(graph)
    assert "radix.kv" in graph["radix.tree"]  # the graph sees `from radix import kv`
    assert not circles(graph)


# ------------------------------------------------------------------ hubs

#: Files every kind passes through; a kind binds itself elsewhere (docs/adding-a-kind.md).
HUBS = ("server/sglang/launch/plugin.py", "server/sglang/launch/args.py",
        "server/sglang/scheduling/scheduler.py", "bench/run.py", "bench/sim/engine.py")


def kind_mentions(path: Path) -> list[str]:
    """Where ``path`` names a kind: its group as a string (``"cache"``), its switch
    (``+cache=``), or an import of its contract package (``policies.cache``)."""
    from compose.kinds import kinds

    found: list[str] = []
    tree = ast.parse(path.read_text())
    groups = {k.group for k in kinds()}
    packages = {k.contract_module for k in kinds()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            found += [f"{node.lineno}: {text!r}" for g in groups if text == g or f"+{g}=" in text]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [f"{node.lineno}: from {node.module}" for p in packages
                      if node.module == p or node.module.startswith(p + ".")]
    return found


def test_kind_mentions_finds_a_kind(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('from policies.cache.lru import LruPolicy\nx = "router"\ny = "use +admission=basin"\n')
    assert len(kind_mentions(probe)) == 3


def test_the_hubs_name_no_kind():
    assert {h: kind_mentions(REPO / h) for h in HUBS} == {h: [] for h in HUBS}
