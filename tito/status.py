"""`tito status`: where each module stands, from facts only.

Exported and in-sync are computed now; the test column is the last *recorded*
`tito test` run (with its time), or "not run". A result recorded for an older
version of the notebook says so instead of passing for the current one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .course import CourseModule, Settings, list_modules
from .export import module_in_sync
from .notebook import read_text
from .testing import RunRecord, load_results, notebook_digest

_DEFAULT_EXP = re.compile(r"^#\|\s*default_exp\s+(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class ModuleStatus:
    module: CourseModule
    package_file: Path | None  # where its default_exp exports to; None if the notebook names none
    exported: bool
    in_sync: bool
    sync_detail: str
    last_run: RunRecord | None
    notebook_changed: bool  # the notebook differs from the one the last run tested

    @property
    def tests(self) -> str:
        """"not run", or e.g. "passed 2026-11-21 06:10 UTC (inline passed, pytest passed)"."""
        if self.last_run is None:
            return "not run"
        state = "passed" if self.last_run.passed else "failed"
        when = self.last_run.finished_at.replace("T", " ")[:16] + " UTC"
        parts = ", ".join(f"{name} {part.status}" for name, part in self.last_run.parts.items())
        note = "; the notebook changed since" if self.notebook_changed else ""
        return f"{state} {when} ({parts}){note}"


def package_file(settings: Settings, module: CourseModule) -> Path | None:
    """The package file a module exports to, read from its `#| default_exp` line."""
    match = _DEFAULT_EXP.search(read_text(module.notebook))
    if not match:
        return None
    return settings.lib_path / Path(*match.group(1).split(".")).with_suffix(".py")


def module_status(settings: Settings, module: CourseModule, runs: dict[str, RunRecord]) -> ModuleStatus:
    target = package_file(settings, module)
    exported = target is not None and target.is_file()
    in_sync, detail = module_in_sync(settings, module)
    last = runs.get(module.key)
    changed = last is not None and last.notebook_sha256 not in (None, notebook_digest(module))
    return ModuleStatus(module, target, exported, in_sync, detail, last, changed)


def course_status(settings: Settings, modules: list[CourseModule] | None = None) -> list[ModuleStatus]:
    """One status per module, in course order."""
    runs = load_results(settings)
    return [module_status(settings, m, runs) for m in (modules or list_modules(settings))]
