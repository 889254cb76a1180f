"""The package's architecture rules, checked on the source (docs/architecture.md):

* lower layers never import higher ones, function-level imports included;
* no import cycles between modules, function-level imports included;
* no module of the package is over 600 lines;
* outside ``tasks/``, no code names a registered task (help texts, docstrings and a parser's default task aside):
  packages ask the task registry (:mod:`sim2real.tasks`) instead of comparing names.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600

#: Layers, lowest first: a module may import its own layer and lower ones. Matched by the longest prefix.
LAYERS = {
    "sim2real": 1, "sim2real.configs": 1,
    "sim2real.sim": 2,
    "sim2real.curricula": 3,
    "sim2real.tasks": 4,
    "sim2real.policies": 5,
    "sim2real.deploy": 6,  # ROS plumbing: ros_*, safety, recording, footsteps
    "sim2real.deploy.nodes": 7, "sim2real.hardware": 7, "sim2real.deploy.finetune": 7,
    "sim2real.viewer": 7,  # sim2real view: reads policies (5) and MCAP recordings (6)
    "sim2real.deploy.arguments": 8, "sim2real.bench": 8, "sim2real.cli": 8, "sim2real.__main__": 8,
}


def package_modules() -> dict[str, Path]:
    """Every module of the package (tests, docs and build outputs aside) by dotted name."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", "build", "docs") or rel.name == "setup.py" or any(
                p.startswith(".") for p in rel.parts):
            continue
        parts = ("sim2real", *rel.with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = package_modules()


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def imports(name: str, path: Path) -> set[str]:
    """The package modules ``name`` imports anywhere in its source (function level included)."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: imports(name, path) for name, path in MODULES.items()}


def test_the_scan_sees_the_package():
    assert {"sim2real.cli", "sim2real.tasks", "sim2real.policies.runner", "sim2real.deploy.nodes.dispatch"} <= set(
        MODULES)
    assert "sim2real.tasks.spec" in GRAPH["sim2real.tasks"]


def test_lower_layers_never_import_higher_ones():
    bad = [f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
           for a, deps in GRAPH.items() for b in sorted(deps) if layer(b) > layer(a)]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_module_is_over_600_lines():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def _names_outside_docs(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants in code: docstrings, ``help=`` texts and parser defaults left out."""
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.keyword) and node.arg in ("help", "default", "default_task", "description"):
            for sub in ast.walk(node.value):
                skip.add(id(sub))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def test_no_task_names_outside_tasks():
    from sim2real.tasks import tasks

    names = set(tasks())
    bad = []
    for name, path in MODULES.items():
        if name.startswith("sim2real.tasks"):
            continue
        for line, text in _names_outside_docs(ast.parse(path.read_text())):
            if text in names:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {text!r}")
    assert not bad, "\n".join(bad)


def test_the_scan_finds_function_level_and_relative_imports(tmp_path):
    """A function-level import and a relative import are both seen (so the rules above can fail)."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from sim2real.cli import main\n    from ..policies import runner\n")
    found = imports("sim2real.tasks.probe", source)
    assert found == {"sim2real.cli", "sim2real.policies", "sim2real.policies.runner"}
    assert layer("sim2real.cli") > layer("sim2real.tasks.probe")
    names = [text for _, text in _names_outside_docs(ast.parse(
        '"""quadrotor-hover in a docstring"""\nx = "quadrotor-hover"\nf(help="quadrotor-hover")\n'))]
    assert names == ["quadrotor-hover"]
