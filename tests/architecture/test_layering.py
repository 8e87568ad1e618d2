"""The guard of docs/ARCHITECTURE.md: layers import only downwards, pytest only in plugin/.

Every import of every module is read from its source (module level, inside functions, under
``TYPE_CHECKING``, relative or absolute), so a lazy import cannot hide an upward edge, and every
one of them counts for cycles too: two modules that name each other, even only in annotations,
are one module in two files. Break such a cycle by moving what both need into a module of its
own (in ``sim/``, ``server_api`` is the server as its routes and encoders see it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_llmperf"

# Bottom to top. Packages on one rank are siblings and may not import each other.
LAYERS: dict[str, int] = {
    "base": 0,
    "core": 1,
    "sim": 1,
    "launch": 2,
    "verdicts": 3,
    "history": 4,
    "report": 5,
    "run": 6,
    "plugin": 7,
    "cli": 8,
    "": 9,  # the package's __init__: the lazy public API over everything
}
PYTEST_ALLOWED = {"plugin"}
MAX_LINES = 600


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str, top: str) -> str:
    """``top.core.sweep`` → ``core``; ``top.cli`` → ``cli``; ``top`` → ``""``."""
    rest = module.split(".")[1:]
    return rest[0] if rest else ""


def imports_of(path: Path, module: str, is_package: bool) -> list[tuple[str, int]]:
    """Every module ``path`` imports, wherever the import stands: (module, line), relative
    made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((target, node.lineno))
            # ``from pkg import submodule`` imports the submodule too
            out += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
    return out


def check_layering(root: Path, layers: dict[str, int] = LAYERS) -> list[str]:
    """Every violation in the package at ``root``: unknown layer, upward or sideways import,
    pytest outside the allowed layers, an import cycle, a module over MAX_LINES."""
    top = root.name
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        modules[module_name(path, root)] = path
    problems: list[str] = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        src = layer_of(mod, top)
        if src not in layers:
            problems.append(f"{mod}: in no layer (add {src!r} to LAYERS and ARCHITECTURE.md)")
            continue
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_LINES:
            problems.append(f"{mod}: {lines} lines (over {MAX_LINES}): split it along a seam")
        for target, line in imports_of(path, mod, path.name == "__init__.py"):
            head = target.split(".")[0]
            if head in ("pytest", "_pytest") and src not in PYTEST_ALLOWED:
                problems.append(f"{mod}:{line}: imports {target} outside plugin/")
            if head != top or target not in modules:
                continue
            graph[mod].add(target)
            dst = layer_of(target, top)
            if target == top and src != "":
                problems.append(f"{mod}:{line}: imports the package root (the public API)")
            elif dst not in layers or dst == src:
                continue
            elif layers[dst] > layers[src]:
                problems.append(f"{mod}:{line}: imports {target} from a higher layer ({dst})")
            elif layers[dst] == layers[src]:
                problems.append(f"{mod}:{line}: imports {target} from sibling layer {dst}")
    for cycle in _cycles(graph):
        members = set(cycle)
        edges = [f"{a} -> {b}" for a in cycle for b in sorted(graph[a] & members)]
        problems.append(f"import cycle: {', '.join(cycle)} ({'; '.join(edges)})")
    return problems


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_package_is_layered() -> None:
    problems = check_layering(PACKAGE)
    assert problems == [], "\n".join(problems)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


TYPING_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {}\n"
BASE = {"__init__.py": "", "base/__init__.py": "", "core/__init__.py": "", "plugin/__init__.py": ""}


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"base/a.py": "def f():\n    from pkg.core import b\n", "core/b.py": ""}, "higher layer"),
        ({"core/b.py": "from ..sim import s\n", "sim/__init__.py": "", "sim/s.py": ""}, "sibling"),
        ({"core/b.py": "import pytest\n"}, "outside plugin/"),
        ({"core/b.py": "from pkg.core import c\n", "core/c.py": "import pkg.core.b\n"}, "cycle"),
        (
            {
                "core/b.py": "def f():\n    from pkg.core import c\n",
                "core/c.py": "from . import b\n",
            },
            "cycle",
        ),
        (
            {
                "core/b.py": TYPING_ONLY.format("import pkg.run.r"),
                "run/__init__.py": "",
                "run/r.py": "",
            },
            "higher layer",
        ),
        ({"core/b.py": "from pkg import thing\n"}, "package root"),
        ({"extra/x.py": ""}, "in no layer"),
        ({"core/b.py": "x = 1\n" * (MAX_LINES + 1)}, "split it"),
    ],
)
def test_each_violation_is_caught(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    root = _tree(tmp_path, {**BASE, **files})
    problems = check_layering(root)
    assert any(expected in p for p in problems), problems


def test_pytest_is_allowed_in_plugin(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**BASE, "plugin/hooks.py": "import pytest\nfrom pkg.core import b\n"})
    (root / "core" / "b.py").write_text("")
    assert check_layering(root) == []


def test_a_type_only_back_reference_is_a_cycle(tmp_path: Path) -> None:
    files = {
        "core/b.py": "from pkg.core import c\n",
        "core/c.py": TYPING_ONLY.format("import pkg.core.b"),
    }
    problems = check_layering(_tree(tmp_path, {**BASE, **files}))
    assert problems == [
        "import cycle: pkg.core.b, pkg.core.c (pkg.core.b -> pkg.core.c; pkg.core.c -> pkg.core.b)"
    ], problems


def test_a_cycle_through_function_local_and_type_only_imports_is_named(tmp_path: Path) -> None:
    files = {
        "core/a.py": "def f():\n    from pkg.core import b\n",
        "core/b.py": TYPING_ONLY.format("from pkg.core.c import C"),
        "core/c.py": "from pkg.core import a\n",
        "core/d.py": "from pkg.core import a\n",  # imports into the cycle, not part of it
    }
    problems = check_layering(_tree(tmp_path, {**BASE, **files}))
    cycle = "pkg.core.a -> pkg.core.b; pkg.core.b -> pkg.core.c; pkg.core.c -> pkg.core.a"
    assert problems == [f"import cycle: pkg.core.a, pkg.core.b, pkg.core.c ({cycle})"], problems
