"""`tito status`: where each module stands, from facts only.

Exported, in sync and the stubs left are computed now; the test column is the last
*recorded* `tito test` run (with its time), or "not run". A result recorded for an
older version of the notebook says so instead of passing for the current one. A
`.ipynb` copy saved after the `.py` notebook is flagged: tito exports the `.py`, so
edits made in the copy would be lost. One module that cannot be read never hides the others,
and a module whose notebook was deleted is listed as missing, with how to bring it back.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .course import MODULE_DIR_PATTERN, CourseModule, Settings, list_modules
from .export import module_in_sync, newer_ipynb, scan_targets
from .notebook import NotebookError, Progress, read_text, solution_progress
from .testing import RunRecord, load_results, notebook_digest


@dataclass(frozen=True)
class ModuleStatus:
    module: CourseModule
    package_file: Path | None  # where its default_exp exports to; None if the notebook names none
    exported: bool
    in_sync: bool
    sync_detail: str
    progress: Progress | None  # None when the notebook's markers (or bytes) cannot be read
    last_run: RunRecord | None
    notebook_changed: bool  # the notebook differs from the one the last run tested
    newer_ipynb: list[Path]  # .ipynb copies saved after the .py notebook

    @property
    def stubs(self) -> str:
        """"3 of 15 left", "done (15 written)", or "?" when the notebook cannot be read."""
        if self.progress is None:
            return "?"
        if self.progress.blocks == 0:
            return "none"
        if self.progress.stubs_left == 0:
            return f"none left ({self.progress.blocks} written)"
        return f"{self.progress.stubs_left} of {self.progress.blocks} left"

    @property
    def tests(self) -> str:
        """"not run", or e.g. "passed 2026-11-21 06:10 UTC (inline passed, pytest passed)"."""
        if self.last_run is None:
            return "not run"
        when = self.last_run.finished_at.replace("T", " ")[:16] + " UTC"
        parts = ", ".join(f"{name} {part.status}" for name, part in self.last_run.parts.items())
        state = self.last_run.verdict
        note = "; the notebook changed since" if self.notebook_changed else ""
        return f"{state} {when}" + (f" ({parts})" if parts else "") + note


def package_file(settings: Settings, module: CourseModule) -> Path | None:
    """The package file a module exports to, read from its `#| default_exp` line."""
    targets = scan_targets(module, default_only=True)
    if not targets:
        return None
    return settings.lib_path / Path(*targets[0].split(".")).with_suffix(".py")


def module_status(settings: Settings, module: CourseModule, runs: dict[str, RunRecord]) -> ModuleStatus:
    target = package_file(settings, module)
    exported = target is not None and target.is_file()
    in_sync, detail = module_in_sync(settings, module)
    try:
        progress = solution_progress(read_text(module.notebook), module.notebook)
    except NotebookError:
        progress = None
    last = runs.get(module.key)
    changed = last is not None and last.notebook_sha256 not in (None, notebook_digest(module))
    return ModuleStatus(module, target, exported, in_sync, detail, progress, last, changed, newer_ipynb(module))


def course_status(settings: Settings, modules: list[CourseModule] | None = None) -> list[ModuleStatus]:
    """One status per module, in course order."""
    runs = load_results(settings)
    return [module_status(settings, m, runs) for m in (modules or list_modules(settings))]


@dataclass(frozen=True)
class MissingNotebook:
    """A module the course knows of (its folder, its tests, a backup or a recorded run) whose notebook is gone."""

    key: str  # "03_layers"
    notebook: Path  # where the notebook belongs
    has_backups: bool

    def advice(self, settings: Settings) -> str:
        """What `tito status` says about it: where it belongs and how to bring it back."""
        relpath = self.notebook.relative_to(settings.root).as_posix()
        if self.has_backups:
            return (f"{self.key} has no notebook any more, but it has backups: `tito module reset {self.key} "
                    f"--restore` lists them (`git checkout -- {relpath}` brings back the committed version instead).")
        return (f"{self.key} has no notebook any more ({relpath}) and no backup: if it was committed, "
                f"`git checkout -- {relpath}` brings it back; otherwise copy it from the course's student edition "
                "and write your solutions again.")


def _module_folders(folder: Path) -> set[str]:
    """Names of the module-like folders (`NN_name`) in `folder` that hold something."""
    if not folder.is_dir():
        return set()
    return {p.name for p in folder.iterdir()
            if p.is_dir() and MODULE_DIR_PATTERN.match(p.name) and any(p.iterdir())}


def missing_notebooks(settings: Settings, runs: dict[str, RunRecord] | None = None) -> list[MissingNotebook]:
    """Modules whose notebook is gone although the course still knows them, in course order.

    `list_modules` lists only notebooks that exist, so without this a deleted notebook would
    simply vanish from `tito status`."""
    from .reset import BACKUPS_DIR

    present = {m.key for m in list_modules(settings)}
    backed_up = _module_folders(settings.state_path / BACKUPS_DIR)
    runs = load_results(settings) if runs is None else runs
    known = (_module_folders(settings.nbs_path) | _module_folders(settings.tests_path) | backed_up
             | {name for name in runs if MODULE_DIR_PATTERN.match(name)})
    missing = []
    for key in sorted(known - present):
        name = MODULE_DIR_PATTERN.match(key).group(2)
        missing.append(MissingNotebook(key, settings.nbs_path / key / f"{name}_dev.py", key in backed_up))
    return missing
