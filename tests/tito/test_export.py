"""tito export: reproducible, all-or-nothing, and no solution marker ever reaches the package."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tito.course import load_settings, resolve_module
from tito.export import export_modules, module_in_sync, render_modules
from tito.notebook import BEGIN_MARKER, END_MARKER, NotebookError

REPO = Path(__file__).resolve().parents[2]


def test_export_twice_gives_identical_bytes(course):
    module = course.module("01")
    export_modules(course.settings, [module])
    first = course.package_bytes()
    results = export_modules(course.settings, [module])
    assert course.package_bytes() == first
    assert [r.changed for r in results] == [False]


def test_committed_package_equals_a_fresh_export():
    """The repository's tinytorch/core/tensor.py is exactly what exporting module 01 gives."""
    settings = load_settings(REPO)
    module = resolve_module(settings, "01_tensor")
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / settings.lib_name
        made, inits = render_modules(settings, [module], staging)
        for relative in [made[0][2], Path("__init__.py")]:
            assert (staging / relative).read_bytes() == (settings.lib_path / relative).read_bytes(), relative
    assert module_in_sync(settings, module) == (True, "in sync")


def test_markers_never_reach_the_package(course):
    notebook = course.module("01").notebook.read_text(encoding="utf-8")
    assert notebook.count(BEGIN_MARKER) > 5  # the check below is about real solution blocks
    export_modules(course.settings, [course.module("01")])
    for name, data in course.package_bytes().items():
        text = data.decode("utf-8")
        assert BEGIN_MARKER not in text and END_MARKER not in text, name


BROKEN = {
    "syntax error in an export cell": (
        lambda toy: toy.replace("def double(x):", "def double(x:"), "def double(x:", "syntax error"),
    "BEGIN never closed": (
        lambda toy: toy.replace("    ### END SOLUTION\n", ""), BEGIN_MARKER, "never closed"),
    "END without BEGIN": (
        lambda toy: toy.replace("    ### BEGIN SOLUTION\n", ""), END_MARKER, "without a matching"),
    "nested markers": (
        lambda toy: toy.replace("    return 2 * x\n", f"    {BEGIN_MARKER}\n    return 2 * x\n    {END_MARKER}\n"),
        BEGIN_MARKER, "nested"),
    "no default_exp": (
        lambda toy: toy.replace("#| default_exp core.toy\n", ""), None, "default_exp"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_notebook_changes_nothing(course, case):
    """Every broken case: an error naming file and line, and not one package byte changed,
    even for module 01 exported in the same call with a change of its own."""
    edit, fragment, words = BROKEN[case]
    text = edit(course.TOY)
    path = course.add_module("02_toy", text)
    tensor = course.module("01").notebook
    tensor.write_text(tensor.read_text(encoding="utf-8") + "\n# %%\n#| export\nADDED = 1\n", encoding="utf-8")
    line = 1 if fragment is None else course.line_of(text, fragment, 2 if case == "nested markers" else 1)
    before = course.package_bytes()

    with pytest.raises(NotebookError) as err:
        export_modules(course.settings, [course.module("01"), course.module("02")])
    assert f"{path}:{line}:" in str(err.value) and words in str(err.value)
    assert course.package_bytes() == before

    cli = course.tito("export", "--all")
    assert cli.returncode == 1
    assert f"toy_dev.py:{line}:" in cli.stdout, cli.stdout
    assert course.package_bytes() == before


def test_export_from_a_subfolder_and_by_number(course):
    tensor = course.module("01").notebook
    tensor.write_text(tensor.read_text(encoding="utf-8") + "\n# %%\n#| export\nADDED = 1\n", encoding="utf-8")
    done = course.tito("export", "1", cwd=course.root / "tests" / "01_tensor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "updated" in done.stdout
    assert "ADDED = 1" in (course.settings.lib_path / "core" / "tensor.py").read_text(encoding="utf-8")
