"""Later modules import public names only (CONTRIBUTING: "later modules import public names, never
`_private` ones"): a static scan of every notebook's imports, and of the milestones and benchmarks.

A `_name` is free to change with its own module's lesson; a later module that imports it breaks
when it does. A notebook may import its own private names (from the package files it exports:
its `#| default_exp` and any `#| export NAME` cells)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPORT_TARGET = re.compile(r"^#\|\s*(?:default_exp|export)\s+([\w.]+)\s*$", re.MULTILINE)


def own_modules(source: str) -> set[str]:
    """The package modules a notebook exports to: `#| default_exp core.layers` -> tinytorch.core.layers."""
    return {f"tinytorch.{name}" for name in EXPORT_TARGET.findall(source)}


def private_imports(source: str, own: set[str] = frozenset()) -> list[tuple[int, str, str]]:
    """[(line, tinytorch module, private name)] for every `_name` (not `__dunder__`) that `source`
    takes from a tinytorch module other than those in `own`: `from tinytorch.x import _name`, and
    `alias._name` after `import tinytorch.x as alias`."""
    found: list[tuple[int, str, str]] = []
    aliases: dict[str, str] = {}
    tree = ast.parse(source)

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tinytorch":
            if node.module not in own:
                found.extend((node.lineno, node.module, a.name) for a in node.names if private(a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tinytorch" and a.asname and a.name not in own:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and private(node.attr)):
            found.append((node.lineno, aliases[node.value.id], node.attr))
    return sorted(found)


def test_the_scan_finds_what_it_must():
    source = ("from tinytorch.core.attention import softmax, _cast\n"
              "import tinytorch.models.transformer as tf\n"
              "tf._check_eps('x', 1)\n"
              "from tinytorch.core.layers import _is_parameter\n"
              "from tinytorch.core.tensor import __all__\n")
    got = private_imports(source, own={"tinytorch.core.layers"})
    assert got == [(1, "tinytorch.core.attention", "_cast"), (3, "tinytorch.models.transformer", "_check_eps")], (
        f"the scan must report _cast and tf._check_eps, not the notebook's own _is_parameter nor __all__; got {got}")
    assert own_modules("# %%\n#| default_exp core.layers\n# %%\n#| export testing\n") == {
        "tinytorch.core.layers", "tinytorch.testing"}


NOTEBOOKS = sorted(ROOT.glob("modules/*/*_dev.py"))
# Companion notebooks (given code beside a lesson, `CourseModule.companions`) are notebooks too.
NOTEBOOKS += sorted(p for p in ROOT.glob("modules/*/*.py") if not p.name.endswith("_dev.py"))
PROGRAMS = sorted([*ROOT.glob("milestones/*.py"), *ROOT.glob("benchmarks/*.py")])


@pytest.mark.parametrize("path", NOTEBOOKS + PROGRAMS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_of_another_module_is_imported(path):
    source = path.read_text(encoding="utf-8")
    bad = private_imports(source, own_modules(source) if path in NOTEBOOKS else set())
    assert not bad, (
        f"{path.relative_to(ROOT)} uses private names of other modules: "
        + "; ".join(f"line {line}: {module}.{name}" for line, module, name in bad)
        + ". Make the name public (documented) in the module that defines it, or stop needing it.")


def test_the_scan_sees_every_notebook():
    lessons = [p for p in NOTEBOOKS if p.name.endswith("_dev.py")]
    assert len(lessons) >= 21, f"expected a notebook per module under modules/, found {len(lessons)}"
