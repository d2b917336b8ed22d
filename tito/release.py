"""`tito release student DIR` and `tito release check`: the student edition, and proof it needs students.

The student edition is this repository with every solution block's body replaced
by a `NotImplementedError` stub, the package regenerated from those stubs, and a
README that tells a student what to do.  Every notebook is checked before
anything is written, so a bad marker refuses the whole release.

`release check` proves, one module at a time, that the tests need the student's code:
in a throw-away copy of the course where only module M is stubbed, M's notebook
script and M's pytest tests must *fail* (the reference passing is what `tito test`
proves). It also proves the module's mistakes catalogue (`mistakes.toml`): each
catalogued mistake, made in a copy, makes the first failure `tito test` shows name the cause.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tinytorch.files import atomic_write

from .course import CourseError, CourseModule, Settings, list_modules, load_settings
from .destination import check_accepts_new_files, nearest_existing
from .export import export_modules, scan_targets
from .mistakes import CATALOGUE_FILE, MIN_MISTAKES, Mistake, load_catalogue
from .notebook import (BEGIN_MARKER, END_MARKER, NotebookError, check_syntax, find_solution_blocks,
                       is_stub_body, read_text, stub_text)
from .runner import ProcessResult, describe_pytest, pytest_counts, run_python, side_by_side
from .testing import (PROGRAM_TIMEOUT_S, PartResult, RunRecord, first_failure_only, inline_part,
                      shown_failure)

# What an edition is made of, besides modules/ (stubbed) and the package (regenerated).
EDITION_ITEMS = ("tests", "tito", "milestones", "datasets", "benchmarks", ".ci",
                 "settings.ini", "pyproject.toml", "CONTRIBUTING.md", ".gitignore")
# mistakes.toml quotes the reference solutions: it never leaves the reference edition.
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.ipynb",
                                 ".pytest_cache", ".hypothesis", "*.tito-new", CATALOGUE_FILE)
# `release check` runs modules in threads; nbdev was not written for that, so exports
# (a second each) take turns while the tests (the slow part) run side by side.
_EXPORT_LOCK = threading.Lock()


@dataclass(frozen=True)
class ReleaseResult:
    dest: Path
    modules: list[str]  # module keys, in course order
    stubs: int  # solution blocks replaced
    package_files: int


def stubbed_notebooks(settings: Settings, modules: list[CourseModule]) -> dict[str, str]:
    """{module key: student text} for `modules`; raises NotebookError (file:line) on any bad notebook."""
    stubbed = {}
    for module in modules:
        relpath = module.notebook.relative_to(settings.root).as_posix()
        text = stub_text(read_text(module.notebook), module.notebook, relpath, module.key)
        check_syntax(text, module.notebook)
        stubbed[module.key] = text
    return stubbed


def copy_course(settings: Settings, dest: Path, notebooks: dict[str, str], with_package: bool) -> None:
    """Copy the course into `dest`, writing `notebooks` ({key: text}) over those modules' notebooks."""
    for module in list_modules(settings):
        folder = dest / module.folder.relative_to(settings.root)
        shutil.copytree(module.folder, folder, ignore=_IGNORE)
        if module.key in notebooks:
            (folder / module.notebook.name).write_text(notebooks[module.key], encoding="utf-8")
    items = [*EDITION_ITEMS, settings.lib_path.name] if with_package else EDITION_ITEMS
    for name in items:
        source = settings.root / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=_IGNORE)
        elif source.is_file():
            shutil.copy2(source, dest / name)


def _module_title(module: CourseModule) -> str:
    """"Tensor" from the notebook's first heading `# # Module 01: Tensor`, else from its name."""
    for line in read_text(module.notebook).splitlines():
        if line.startswith("# # "):
            return line[4:].split(":", 1)[-1].strip()
    return module.name.replace("_", " ").title()


def student_readme(settings: Settings, modules: list[CourseModule]) -> str:
    order = "\n".join(
        f"{i}. `{m.key}`: {_module_title(m)} (`{m.notebook.relative_to(settings.root).as_posix()}`)"
        for i, m in enumerate(modules, start=1)
    )
    first, number = (modules[0].key, modules[0].number) if modules else ("01_tensor", "01")
    return f"""# TinyTorch: student edition

You build a deep-learning framework from scratch, one module at a time. Each module is a
notebook in `modules/`; the parts you write are marked:

```python
    ### BEGIN SOLUTION
    raise NotImplementedError(...)   # replace this line with your code
    ### END SOLUTION
```

Keep the marker lines: `tito module reset` and the course tools find your work by them.

## Set up (once)

```bash
python3 -m venv .venv && source .venv/bin/activate
pip install -e ".[dev]"
tito doctor
```

## The workflow, for every module

1. **Edit** the notebook, e.g. `modules/{first}/`: in JupyterLab (below) or in any editor
   (it is a plain Python file). Write each part in place of its `raise NotImplementedError(...)`.
2. **Export** it into the `{settings.lib_name}` package: `tito export {number}`.
3. **Test** it: `tito test {number}` (the notebook's own tests and `tests/{first}/`).
   A module you have not started is one line, "not started: N stubs left". Once you have
   started, it shows one line per section of the lesson (passed, failing, or waiting for a
   stub you have not written yet) and the next stub to write; the first failure in full
   and how many more there are;
   `tito test {number} -v` shows everything, `-x` stops at the first failing test.
   Your module is done when it says passed. `tito test {number} --notebook` also runs the
   notebook in a Jupyter kernel (the third column of the table). Some tests compare your
   numbers with PyTorch's; they are skipped until you `pip install torch` (the CPU build is
   enough), and GPU tests are skipped without CuPy and a GPU: `-v` lists what was skipped.

`tito status` shows every module: exported, in sync with its notebook, stubs left, last test result.
`tito module reset {number}` starts a module over (your version is saved first in
`.tito/backups/`; `tito module reset {number} --restore` lists what each backup holds and
brings one back, even when the notebook was deleted).

## JupyterLab

```bash
jupytext-config set-default-viewer python   # once: a double click opens a .py as a notebook
jupyter lab
```

(Or right-click a `.py` and choose *Open With → Notebook*.) Saving writes the `.py` itself.
Do not convert a lesson to `.ipynb` and work in the copy: tito exports the `.py`, so edits in
the copy would not reach the package (`tito status` warns when it sees one).

A module uses the earlier modules through the package, so do them in order:

{order}

When the modules are done, `tito milestone list` shows the programs that train real
models with your framework.
"""


MANIFEST_FILE = ".tito-release.json"  # at the edition's root: every file the release wrote, with its SHA-256
MANIFEST_FORMAT = "tito-release-v1"
# Made by Python, pytest and pip from the edition's own files: replacing them loses nothing.
_CACHES = ("__pycache__", ".pytest_cache", ".hypothesis")


def _is_cache(relative: Path) -> bool:
    return any(part in _CACHES or part.endswith(".egg-info") for part in relative.parts)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def edition_files(folder: Path) -> dict[str, str]:
    """{relative posix path: SHA-256} of every file under `folder` (links and caches left out)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not path.is_symlink() and not _is_cache(relative) and relative.name != MANIFEST_FILE:
            files[relative.as_posix()] = _sha256(path)
    return files


def write_manifest(folder: Path) -> None:
    """Record every file of the edition in `folder`, so that only they are ever replaced by `--force`."""
    payload = {"format": MANIFEST_FORMAT, "files": edition_files(folder)}
    with atomic_write(folder / MANIFEST_FILE, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(payload, indent=1) + "\n")


def _read_manifest(dest: Path) -> dict[str, str]:
    path = dest / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CourseError(f"{path} cannot be read ({err}), so tito cannot tell its files from yours; it replaces "
                          "nothing. Choose a new folder.") from None
    files = data.get("files") if isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise CourseError(f"{path} is not a manifest tito wrote, so tito cannot tell its files from yours; it "
                          "replaces nothing. Choose a new folder.")
    return files


def _not_ours(dest: Path, manifest: dict[str, str]) -> list[str]:
    """What in `dest` the release did not write, or that changed since: "notes.txt (not written by the
    release)", ".venv/ (not written by the release)", "modules/…/x_dev.py (changed since the release)"."""
    folders = {parent.as_posix() for name in manifest for parent in Path(name).parents}
    found = []

    def walk(folder: Path) -> None:
        for path in sorted(folder.iterdir()):
            relative = path.relative_to(dest)
            name = relative.as_posix()
            if relative == Path(MANIFEST_FILE) or _is_cache(relative):
                continue
            if path.is_dir() and not path.is_symlink():
                if name in folders:
                    walk(path)
                elif any(path.iterdir()):
                    found.append(f"{name}/ (not written by the release)")
            elif name not in manifest:
                found.append(f"{name} (not written by the release)")
            elif path.is_symlink() or not path.is_file() or _sha256(path) != manifest[name]:
                found.append(f"{name} (changed since the release wrote it)")

    walk(dest)
    return found


def check_destination(settings: Settings, dest: Path, force: bool) -> None:
    """Refuse a destination that would overwrite the source or anyone's files.

    Without --force the folder must be new or empty. With --force it may also hold a previous
    edition, exactly as the release wrote it (its manifest, `.tito-release.json`, lists every file
    with its SHA-256): never a git repository, never a file the release did not write or that
    changed since (a student's work, their test results, a virtual environment).
    """
    root = settings.root
    sources = [settings.lib_path, settings.nbs_path, *(root / name for name in EDITION_ITEMS)]
    if root.is_relative_to(dest) or any(dest.is_relative_to(s) for s in sources):
        raise CourseError(
            f"{dest}: the student edition cannot be written over or inside the course's own files; "
            "choose a new folder, e.g. `tito release student ../tinytorch-student`."
        )
    if dest.exists() and not dest.is_dir():
        raise CourseError(f"{dest} exists and is not a folder.")
    check_accepts_new_files(nearest_existing(dest.parent), str(dest))  # the edition is staged beside it
    if not dest.is_dir() or not any(dest.iterdir()):
        return
    if not force:
        raise CourseError(f"{dest} is not empty; use --force to replace a previous student edition.")
    if (dest / ".git").exists():
        raise CourseError(
            f"{dest} is a git repository (it has a .git): tito release never replaces one, even with --force. "
            "Write the edition to a new folder and copy it in with git (`git status` will show what changed)."
        )
    if not (dest / MANIFEST_FILE).is_file():
        raise CourseError(
            f"{dest} is not empty and does not look like a student edition written by tito release (it has no "
            f"{MANIFEST_FILE}, the list of the files a release wrote); even with --force tito only replaces "
            "a previous edition. Choose a new folder."
        )
    found = _not_ours(dest, _read_manifest(dest))
    if found:
        shown = "; ".join(found[:10]) + (f"; and {len(found) - 10} more" if len(found) > 10 else "")
        raise CourseError(
            f"{dest} holds files that the previous release did not write, or that changed since: {shown}. "
            "tito replaces only an edition exactly as it wrote it, so nothing was changed: move those files "
            "away (or choose a new folder) and run this command again."
        )


def _replace_edition(settings: Settings, staging: Path, dest: Path, force: bool) -> None:
    """Move the finished edition in `staging` to `dest`; the old edition (checked again, after it was
    renamed aside, so nothing written meanwhile is lost) is deleted only once the new one is in place."""
    if not dest.exists():
        staging.rename(dest)
        return
    if not any(dest.iterdir()):
        dest.rmdir()  # fails, and changes nothing, if a file appeared meanwhile
        staging.rename(dest)
        return
    aside = dest.parent / f".{dest.name}.tito-old-{uuid.uuid4().hex[:8]}"
    dest.rename(aside)
    try:
        check_destination(settings, aside, force)
    except CourseError as err:
        aside.rename(dest)
        raise CourseError(str(err).replace(str(aside), str(dest))) from None
    staging.rename(dest)
    shutil.rmtree(aside)


def verify_edition(edition: Settings) -> None:
    """No marker line in the package; every solution block in the notebooks holds only its stub."""
    for path in sorted(edition.lib_path.rglob("*.py")):
        for number, line in enumerate(read_text(path).splitlines(), start=1):
            if BEGIN_MARKER in line or END_MARKER in line:
                raise NotebookError(f"{path}:{number}: a solution marker reached the student package.")
    for module in list_modules(edition):
        if (module.folder / CATALOGUE_FILE).exists():
            raise NotebookError(f"{module.folder / CATALOGUE_FILE}: the mistakes catalogue reached the "
                                "student edition (it quotes the reference solutions).")
        lines = read_text(module.notebook).splitlines()
        for block in find_solution_blocks("\n".join(lines), module.notebook):
            if not is_stub_body(lines[block.begin_line : block.end_line - 1]):
                raise NotebookError(
                    f"{module.notebook}:{block.begin_line}: the student edition still has solution code here."
                )


def write_student_edition(settings: Settings, dest: Path, force: bool = False) -> ReleaseResult:
    """Build the student edition in a staging folder next to `dest`, verify it, then move it in place."""
    dest = Path(dest).resolve()
    check_destination(settings, dest, force)
    modules = list_modules(settings)
    notebooks = stubbed_notebooks(settings, modules)  # every check before anything is written
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.tito-staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        copy_course(settings, staging, notebooks, with_package=False)
        # tito's own tests check the reference edition (they expect module 01 solved);
        # in a student's tree they would only fail for reasons that are not the student's.
        shutil.rmtree(staging / settings.tests_path.name / "tito", ignore_errors=True)
        (staging / "README.md").write_text(student_readme(settings, modules), encoding="utf-8")
        edition = load_settings(staging)
        results = export_modules(edition, list_modules(edition))
        verify_edition(edition)
        write_manifest(staging)
        _replace_edition(settings, staging, dest, force)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    stubs = sum(len(find_solution_blocks(read_text(m.notebook), m.notebook)) for m in modules)
    return ReleaseResult(dest, [m.key for m in modules], stubs, len(results))


# ----------------------------------------------------------------------------------------
# release check: each module's tests fail on its stub


@dataclass(frozen=True)
class StubCheck:
    module: str
    ok: bool  # both the notebook script and pytest failed on the stub, as they must
    notebook: str  # what the notebook script did
    pytest: str  # what pytest reported
    problem: str  # why it is not ok ("" when ok)
    seconds: float


def modules_with_solutions(modules: list[CourseModule]) -> list[CourseModule]:
    return [m for m in modules if find_solution_blocks(read_text(m.notebook), m.notebook)]


def _verdict(notebook: ProcessResult, pytest: ProcessResult | None) -> str:
    """"" when both failed as a stub should make them fail, else what is wrong."""
    if notebook.returncode == 0:
        return "the notebook script passes with the stub: its inline tests do not need the student's code"
    if "NotImplementedError" not in notebook.output:
        last = notebook.tail(1) or f"exit code {notebook.returncode}"
        return f"the notebook script fails, but not on a stub: {last}"
    if pytest is None:
        return "no tests folder for this module"
    counts = pytest_counts(pytest.output)
    if pytest.returncode == 0:
        return "pytest passes with the stub: these tests do not need the student's code"
    if pytest.returncode != 1 or counts.get("errors") or not counts.get("failed"):
        return (f"pytest did not report test failures ({describe_pytest(pytest)}, exit {pytest.returncode}): "
                "a collection or setup error is a defect of the tests, not a failing test")
    return ""


def check_module_stub(settings: Settings, module: CourseModule, workdir: Path) -> StubCheck:
    """Stub only `module` in a copy of the course under `workdir`, regenerate, run its tests."""
    copy = workdir / "course"
    relpath = module.notebook.relative_to(settings.root).as_posix()
    stub = stub_text(read_text(module.notebook), module.notebook, relpath, module.key)
    copy_course(settings, copy, {module.key: stub}, with_package=True)
    copied = load_settings(copy)
    [copied_module] = [m for m in list_modules(copied) if m.key == module.key]
    with _EXPORT_LOCK:
        export_modules(copied, [copied_module])

    smoke = run_python(["-c", "import tinytorch; print(tinytorch.__file__)"], copy, copy)
    imported = Path(smoke.output.strip().splitlines()[-1]).resolve() if smoke.ok else None
    if imported is None or not imported.is_relative_to(copy.resolve()):
        problem = f"the copy does not import its own package: {smoke.tail(3)}"
        return StubCheck(module.key, False, "not run", "not run", problem, smoke.seconds)

    notebook = run_python([copied_module.notebook.name], copied_module.folder, copy, PROGRAM_TIMEOUT_S)
    tests = copied.tests_path / module.key
    pytest = None
    if tests.is_dir():
        pytest = run_python(["-m", "pytest", tests.relative_to(copy).as_posix(), "-q"], copy, copy,
                            PROGRAM_TIMEOUT_S)
    problem = _verdict(notebook, pytest)
    seconds = smoke.seconds + notebook.seconds + (pytest.seconds if pytest else 0.0)
    return StubCheck(
        module.key, not problem,
        "fails" if notebook.returncode else "passes",
        describe_pytest(pytest) if pytest else "no tests",
        problem, seconds,
    )


# ----------------------------------------------------------------------------------------
# release check, part two: every catalogued mistake is caught, and says why

MISTAKE_TIMEOUT_S = 300  # a mistake that hangs the tests is a finding too, but not a slow one
_INLINE_TEST = re.compile(r'File ".*", line \d+, in (test_unit_\w+)')


@dataclass(frozen=True)
class MistakeCheck:
    module: str
    name: str  # the mistake's name in the catalogue, or "(catalogue)" for a check of the catalogue itself
    ok: bool  # a test failed and its output names the cause
    caught_by: str  # the first failing test's id ("" when none failed)
    problem: str  # why it is not ok ("" when ok)
    seconds: float


def check_catalogue_size(module: CourseModule, mistakes: list[Mistake]) -> MistakeCheck | None:
    """A problem row when a module with solution blocks catalogues fewer than MIN_MISTAKES mistakes."""
    if len(mistakes) >= MIN_MISTAKES:
        return None
    return MistakeCheck(module.key, "(catalogue)", False, "",
                        f"{len(mistakes)} mistake(s) in {module.key}/{CATALOGUE_FILE}; "
                        f"catalogue at least {MIN_MISTAKES}", 0.0)


def _make_mistake(settings: Settings, module: CourseModule, mistake: Mistake,
                  copy: Path) -> tuple[Settings, CourseModule] | MistakeCheck:
    """A copy of the course at `copy` with `mistake` made and its module exported, or the problem."""
    copy_course(settings, copy, {module.key: mistake.apply(read_text(module.notebook))}, with_package=True)
    copied = load_settings(copy)
    [copied_module] = [m for m in list_modules(copied) if m.key == module.key]
    try:
        with _EXPORT_LOCK:
            export_modules(copied, [copied_module])
    except NotebookError as err:
        return MistakeCheck(module.key, mistake.name, False, "", f"the notebook with this mistake does not export: {err}",
                            0.0)
    if not (copied.tests_path / module.key).is_dir():
        return MistakeCheck(module.key, mistake.name, False, "", "no tests folder for this module", 0.0)
    return copied, copied_module


def _light_copy(reference: Path, module: CourseModule, text: str, dest: Path, settings: Settings) -> CourseModule:
    """The course at `dest` as the fork of a mistake needs it: its own copy of the module's folder
    holding the mistake's notebook; everything else links to the reference copy (the child has
    imported the reference's package already; a relative path such as `../../datasets` still works)."""
    folder = module.folder.relative_to(settings.root)
    for entry in reference.iterdir():
        if entry.name != folder.parts[0]:
            (dest / entry.name).parent.mkdir(parents=True, exist_ok=True)
            (dest / entry.name).symlink_to(entry)
    for entry in (reference / folder.parent).iterdir():
        if entry.name != folder.name:
            (dest / folder.parent / entry.name).parent.mkdir(parents=True, exist_ok=True)
            (dest / folder.parent / entry.name).symlink_to(entry)
    shutil.copytree(reference / folder, dest / folder)
    notebook = dest / folder / module.notebook.name
    notebook.write_text(text, encoding="utf-8")
    return CourseModule(module.number, module.name, dest / folder, notebook)


def _inline_from_the_difference(settings: Settings, module: CourseModule, texts: dict[int, str],
                                workdir: Path) -> dict[int, tuple[CourseModule, PartResult]]:
    """{index: (its light copy, inline part)} for the mistakes (`texts`: index -> notebook) that
    `tito.cell_variants` ran from their first changed cell, after one run of the reference's
    shared beginning; the mistakes it left to a run from the top are left out."""
    reference = workdir / "reference"
    copy_course(settings, reference, {}, with_package=True)
    [ref_module] = [m for m in list_modules(load_settings(reference)) if m.key == module.key]
    reports = workdir / "reports"
    reports.mkdir()
    light = {i: _light_copy(reference, module, text, workdir / f"light-{i}", settings) for i, text in texts.items()}
    variants = [{"notebook": str(light[i].notebook), "report": str(reports / f"{i}.json"),
                 "output": str(reports / f"{i}.out")} for i in texts]
    plan = {"own_modules": [f"{settings.lib_name}.{t}" for t in scan_targets(module)],
            "timeout_s": MISTAKE_TIMEOUT_S, "variants": variants}
    (workdir / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    run_python(["-m", "tito.cell_variants", ref_module.notebook.name, str(workdir / "plan.json")],
               ref_module.folder, reference, PROGRAM_TIMEOUT_S + len(variants) * MISTAKE_TIMEOUT_S)
    parts = {}
    for i, variant in zip(texts, variants):
        try:
            report = json.loads(Path(variant["report"]).read_text(encoding="utf-8"))
            output = Path(variant["output"]).read_text(encoding="utf-8", errors="replace")
        except (OSError, ValueError):
            continue
        if report.get("forked"):
            ran = ProcessResult(["tito.cell_variants"], int(report.get("exit_code", 1)), output,
                                float(report.get("seconds_wall", 0.0)))
            parts[i] = (light[i], inline_part(light[i], report, ran, MISTAKE_TIMEOUT_S))
    return parts


def check_mistakes(settings: Settings, module: CourseModule, mistakes: list[Mistake], workdir: Path,
                   share_beginning: bool = True) -> list[MistakeCheck]:
    """Make each of `mistakes` in a copy of the course under `workdir`, and find the failure `tito test` shows first.

    That is `tito test`'s own choice (`testing.shown_failure`), found fast by
    `testing.first_failure_only`: the inline tests up to their first failing cell, then, only
    if they all passed, pytest with -x. A mistake is caught when that failure, the one a
    student reads first, contains the catalogued message.

    `share_beginning`: the inline tests of all of them run in one process that runs the
    reference's shared cells once and forks at each mistake's first changed cell
    (`tito.cell_variants`, which says when that would not be the same as a run from the
    top). A mistake the inline tests catch there needs no copy of its own but its module's
    folder; the others (inline tests passed: pytest's failure is the one shown; or left to a
    run from the top) get a whole copy with the module exported, as without sharing.
    """
    results: dict[int, MistakeCheck] = {}
    texts: dict[int, str] = {}
    for i, mistake in enumerate(mistakes):
        text = mistake.apply(read_text(module.notebook))
        try:
            check_syntax(text, module.notebook)
        except NotebookError as err:
            results[i] = MistakeCheck(module.key, mistake.name, False, "",
                                      f"the notebook with this mistake does not export: {err}", 0.0)
            continue
        texts[i] = text
    inline = _inline_from_the_difference(settings, module, texts, workdir) if share_beginning and texts else {}
    for i in texts:
        light, part = inline.get(i, (None, None))
        if light is not None and part is not None and part.failed:
            run = first_failure_only(settings, light, MISTAKE_TIMEOUT_S, inline=part)
        else:
            copy = _make_mistake(settings, module, mistakes[i], workdir / f"mistake-{i}")
            if isinstance(copy, MistakeCheck):
                results[i] = copy
                continue
            run = first_failure_only(*copy, MISTAKE_TIMEOUT_S, inline=part)
        results[i] = _mistake_verdict(module, mistakes[i], run)
    return [results[i] for i in range(len(mistakes))]


def _mistake_verdict(module: CourseModule, mistake: Mistake, run: RunRecord) -> MistakeCheck:
    """Caught when the failure a student is shown first contains the catalogued message."""
    def row(ok: bool, caught_by: str, problem: str) -> MistakeCheck:
        return MistakeCheck(module.key, mistake.name, ok, caught_by, problem, run.seconds)

    shown = shown_failure(run)
    if shown is None:
        return row(False, "", "every test passes with this mistake: add a test that catches it")
    part_name, part = shown
    caught_by = _caught_by(part_name, part)
    if part.summary.startswith("timed out"):
        problem = f"the tests hung for {MISTAKE_TIMEOUT_S} s instead of failing: add a test that fails fast"
    elif mistake.message not in part.detail:
        problem = (f"the first failure a student sees ({caught_by}) does not say {mistake.message!r}: make "
                   "the test that names this mistake fail first, or its assertion message name the cause")
    else:
        problem = ""
    return row(not problem, caught_by, problem)


def _caught_by(part_name: str, part: PartResult) -> str:
    """The failing test as a student would look for it: "inline test_unit_x" or a pytest id."""
    if part_name == "pytest":
        return part.detail.splitlines()[0] if part.detail else "pytest"
    found = _INLINE_TEST.search(part.detail)
    return f"inline {found.group(1)}" if found else f"inline: {part.detail.splitlines()[-1] if part.detail else ''}"


Check = StubCheck | MistakeCheck


def check_release(settings: Settings, modules: list[CourseModule], *, stubs: bool = True,
                  mistakes: bool = True, only: str | None = None, jobs: int = 2,
                  done: Callable[[Check], None] | None = None) -> list[Check]:
    """The stub check and every mistake check of `modules`, `jobs` at a time, each in its own copy.

    `only` restricts the mistakes to the one of that name (for working on a catalogue).
    """
    work: list[Callable[[Path], Check | list[Check]]] = []
    sizes: list[int] = []  # how many checks each job makes: their order of running, longest first
    results: list[Check] = []
    for module in modules:
        if stubs:
            work.append(lambda tmp, m=module: check_module_stub(settings, m, tmp))
            sizes.append(1)
        if mistakes:
            catalogue = load_catalogue(module)  # raises CourseError on a broken catalogue, before any run
            chosen = [m for m in catalogue if only in (None, m.name)]
            if only is not None and not chosen:
                names = ", ".join(m.name for m in catalogue) or "(none)"
                raise CourseError(f"No mistake {only!r} in {module.key}'s catalogue. Its mistakes: {names}")
            if only is None:
                small = check_catalogue_size(module, catalogue)
                if small:
                    results.append(small)
            if chosen:
                work.append(lambda tmp, m=module, chosen=chosen: check_mistakes(settings, m, chosen, tmp))
                sizes.append(len(chosen))

    def one(job: Callable[[Path], Check | list[Check]]) -> list[Check]:
        with tempfile.TemporaryDirectory(prefix="tito-check-") as tmp:
            result = job(Path(tmp))
        checks = result if isinstance(result, list) else [result]
        if done:
            for check in checks:
                done(check)
        return checks

    for small in results:
        if done:
            done(small)
    # Longest first: a module's mistakes run as one job (minutes for the big catalogues), the stub
    # checks (seconds) fill the gaps at the end, so neither core idles while the other finishes.
    order = sorted(range(len(work)), key=lambda i: -sizes[i])
    with side_by_side(jobs) as pool:
        finished = dict(zip(order, pool.map(one, [work[i] for i in order])))
    return results + [check for i in range(len(work)) for check in finished[i]]


def check_stubs(settings: Settings, modules: list[CourseModule], jobs: int = 2,
                done: Callable[[StubCheck], None] | None = None) -> list[StubCheck]:
    """`check_module_stub` for each module, `jobs` at a time, each in its own temporary copy."""
    return check_release(settings, modules, mistakes=False, jobs=jobs, done=done)  # type: ignore[return-value]
