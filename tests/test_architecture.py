"""The package's shape: no module imports a module that imports it back (lazy imports inside
functions count), and `distcgan.run` starts without torch. The tests' shape: shared helpers in
helpers.py, fixtures in conftest.py, and no test module imports another."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from helpers import REPO

PACKAGE = REPO / "distcgan"


def _module_name(path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the distcgan modules it imports anywhere in its text (a package's
    `from P import m` counts as importing P.m when m is a module)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    deps.add(sub if sub in modules else node.module)
            # a module's own package (__init__) is not an edge back to it
        graph[name] = {
            d for d in deps if d in modules and d != name and not name.startswith(d + ".")
        }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_a_module_that_imports_it_back():
    graph = import_graph()
    assert "distcgan.train.loop" in graph and "distcgan.compare.report" in graph
    assert cycles(graph) == []


def test_the_run_package_imports_without_torch():
    code = (
        "import sys\n"
        "import distcgan.run, distcgan.run.atomic, distcgan.run.rundir, distcgan.run.checkpoint\n"
        "import distcgan.run.supervise, distcgan.run.jobplan\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def _imported(path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


# Test code that is not a test module: the shared helpers, the machinery of the one-node Slurm
# fixture, the rules of the LSF/jsrun stand-in (which its bsub and jsrun scripts use too), and
# `make test`'s stage runner.
SUPPORT = {"helpers", "slurm_cluster", "lsf_rules", "jsrun_task", "stages"}


def test_no_test_module_imports_another():
    tests = REPO / "tests"
    local = {p.stem for p in tests.rglob("*.py")}
    assert SUPPORT <= local, SUPPORT - local
    for path in sorted(tests.rglob("*.py")):
        bad = sorted(n for n in _imported(path) if n.split(".")[0] in local - SUPPORT)
        assert not bad, f"{path} imports {bad}: shared test code goes in tests/helpers.py"


def test_conftest_holds_only_fixtures_and_hooks():
    tree = ast.parse((REPO / "tests" / "conftest.py").read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            decorators = [ast.unparse(d) for d in getattr(node, "decorator_list", [])]
            hook = node.name.startswith("pytest_") and any(
                d.startswith("pytest.hookimpl") for d in decorators
            )
            assert hook or any(d.startswith("pytest.fixture") for d in decorators), node.name


def test_the_training_loop_module_has_short_functions():
    tree = ast.parse((PACKAGE / "train" / "loop.py").read_text())
    lengths = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
    }
    assert lengths["train_group"] <= 30 and lengths["_train"] <= 50, lengths
    assert max(lengths.values()) <= 60, lengths


def test_no_function_is_over_60_lines_unless_it_says_why():
    # ruff (make lint) checks arguments, branches and statements; lines are counted here. A
    # function may be longer with a `# long: WHY` comment on its def line.
    long = []
    for root in ("distcgan", "data_prep", "jobs"):
        for path in (REPO / root).rglob("*.py"):
            lines = path.read_text().splitlines()
            for node in ast.walk(ast.parse("\n".join(lines))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > 60 and "# long:" not in lines[node.lineno - 1]:
                        long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({n})")
    assert not long, long
