"""tito export: reproducible, all-or-nothing, and no solution marker ever reaches the package."""
from __future__ import annotations

import codecs
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
    assert [r.target for r in results] == ["core.tensor", "core.tensor_checks"]  # the lesson, then its companion
    assert not any(r.changed for r in results)


def test_committed_package_equals_a_fresh_export():
    """The repository's tinytorch/core/tensor.py (and its companion's file) is exactly what exporting module 01 gives."""
    settings = load_settings(REPO)
    module = resolve_module(settings, "01_tensor")
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / settings.lib_name
        made, inits = render_modules(settings, [module], staging)
        for relative in [*(r for _, _, r in made), Path("__init__.py")]:
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


# ---------------------------------------------------------------------------- issue 9, rows 1, 7, 8


def test_two_notebooks_with_one_default_exp_are_refused_naming_both(course):
    """A student starts module 02 by copying module 01's notebook: nothing may overwrite 01's file."""
    tensor = course.module("01").notebook
    copy = course.add_module("02_copy", tensor.read_text(encoding="utf-8"))
    before = course.package_bytes()
    for args in (["export", "02"], ["export", "01"], ["export", "--all"]):
        result = course.tito(*args)
        assert result.returncode == 1, result.stdout
        out = course.flat(result.stdout)
        assert "two notebooks export `core.tensor`" in out and str(tensor) in out and str(copy) in out, out
        assert "Traceback" not in result.stdout + result.stderr
        assert course.package_bytes() == before


def test_two_notebooks_with_one_secondary_export_target_are_refused(course):
    shared = "\n# %%\n#| export helpers\ndef helper():\n    return 1\n"
    course.add_module("02_toy", course.TOY + shared)
    other = course.add_module("03_other", course.TOY.replace("core.toy", "core.other") + shared)
    with pytest.raises(NotebookError, match="two notebooks export `helpers`") as err:
        export_modules(course.settings, [course.module("02")])
    assert str(other) in str(err.value)


@pytest.mark.parametrize("target, words", [
    ("{tmp}/escaped", "is not a dotted Python module name"),
    ("core..toy", "is not a dotted Python module name"),
    ("__init__", "names a special file"),
    ("core.__main__", "names a special file"),
    ("core", "is the package folder tinytorch/core/ (it holds `core.tensor`)"),
    ("tinytorch.core.toy", "starts with the package name: write `core.toy`"),
    ("core.class", "uses the Python keyword 'class'"),
])
def test_an_export_target_outside_the_package_is_refused(course, tmp_path, target, words):
    target = target.format(tmp=tmp_path)
    text = course.TOY.replace("core.toy", target)
    path = course.add_module("02_toy", text)
    before = course.package_bytes()
    with pytest.raises(NotebookError) as err:
        export_modules(course.settings, [course.module("02")])
    message = str(err.value)
    line = course.line_of(text, "default_exp") if "package folder" not in words else 1
    assert message.startswith(f"{path}:{line}:") and words in message, message
    assert course.package_bytes() == before
    assert list(tmp_path.glob("escaped*")) == []  # nothing written outside the repository


def _latin1_module(course):
    """Module 03 saved by an editor in Latin-1: one byte (é) that is not UTF-8."""
    text = course.TOY.replace("core.toy", "core.latin").replace("Twice x.", "Twice x, café.")
    path = course.add_module("03_latin", text)
    data = text.encode("utf-8").replace("é".encode("utf-8"), b"\xe9")
    path.write_bytes(data)
    offset = data.index(b"\xe9")
    return path, offset, data[:offset].count(b"\n") + 1


def test_a_non_utf8_byte_is_named_with_its_offset_and_stops_only_its_module(course):
    course.add_module("02_toy", course.TOY)
    path, offset, line = _latin1_module(course)
    expected = f"{path}:{line}: byte 0xE9 at offset {offset}"

    with pytest.raises(NotebookError, match="byte 0xE9 at offset") as err:
        export_modules(course.settings, [course.module("03")])
    assert str(err.value).startswith(expected)

    assert course.tito("export", "02").returncode == 0  # the other modules work as before
    every = course.tito("export", "--all")
    assert every.returncode == 1 and expected in course.flat(every.stdout), every.stdout
    status = course.tito("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "byte 0xE9 at offset" in course.flat(status.stdout)
    tested = course.tito("test", "02", "03")
    assert tested.returncode == 1
    assert "02_toy: passed" in tested.stdout and "03_latin: does not export" in tested.stdout
    assert expected in course.flat(tested.stdout)
    assert course.tito("module", "reset", "02").returncode == 0
    for result in (every, status, tested):
        assert "Traceback" not in result.stdout + result.stderr


def test_a_utf8_byte_order_mark_is_accepted(course):
    course.add_module("02_toy", course.TOY)
    [plain] = export_modules(course.settings, [course.module("02")])
    expected = plain.path.read_bytes()
    path = course.add_module("02_toy", course.TOY)
    path.write_bytes(codecs.BOM_UTF8 + course.TOY.encode("utf-8"))
    [with_bom] = export_modules(course.settings, [course.module("02")])
    assert with_bom.path.read_bytes() == expected and not with_bom.changed
    tested = course.tito("test", "02")
    assert tested.returncode == 0 and "02_toy: passed" in tested.stdout, tested.stdout
