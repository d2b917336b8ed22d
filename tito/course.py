"""Where the course lives: the repository root, its settings and its modules.

Every tito command starts here.  Nothing in this file writes anything.
"""
from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path

SETTINGS_FILE = "settings.ini"
MODULE_DIR_PATTERN = re.compile(r"^(\d\d)_([a-z0-9_]+)$")
# A companion notebook's `#| default_exp NAME` (see CourseModule.companions).
COMPANION_TARGET = re.compile(r"^#[ \t]*\|[ \t]*default_exp[ \t]+(\S+)", re.MULTILINE)


class CourseError(Exception):
    """A problem the user can fix; tito prints the message and exits with status 1."""


@dataclass(frozen=True)
class Settings:
    root: Path
    lib_name: str
    lib_path: Path
    nbs_path: Path
    tests_path: Path
    state_path: Path
    version: str
    min_python: str
    test_timeout_minutes: float = 10.0  # one module's tests, all parts together


@dataclass(frozen=True)
class CourseModule:
    """One numbered module: `modules/12_attention/attention_dev.py` is number "12", name "attention"."""

    number: str
    name: str
    folder: Path
    notebook: Path

    @property
    def key(self) -> str:
        return f"{self.number}_{self.name}"

    @property
    def companions(self) -> list[Path]:
        """The module's companion notebooks: given code beside the lesson, each exported with it.

        A companion is a percent-format `.py` file in the module's folder, other than the lesson,
        named after the last part of its own `#| default_exp` target: `attention_checks.py` holding
        `#| default_exp core.attention_checks`. It holds only given code (no solution block); the
        lesson imports its names from the package in one line. Any other `.py` file in the folder (a
        student's scratch file or backup copy) is not a companion and is left alone.
        """
        found = []
        try:
            paths = sorted(self.folder.glob("*.py"))
        except OSError:
            return []
        for path in paths:
            if path.name == self.notebook.name or not path.is_file():
                continue
            try:
                text = path.read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            match = COMPANION_TARGET.search(text)
            if match and match.group(1).rsplit(".", 1)[-1] == path.stem:
                found.append(path)
        return found


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` that holds the course's settings.ini."""
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        settings = folder / SETTINGS_FILE
        if settings.is_file() and "lib_name" in settings.read_text(encoding="utf-8"):
            return folder
    raise CourseError(
        f"No TinyTorch course found at or above {here}: run tito inside the repository "
        f"(the folder that holds {SETTINGS_FILE})."
    )


def load_settings(root: Path | None = None) -> Settings:
    root = find_root() if root is None else Path(root).resolve()
    parser = configparser.ConfigParser()
    parser.read(root / SETTINGS_FILE, encoding="utf-8")
    cfg = parser["DEFAULT"]
    return Settings(
        root=root,
        lib_name=cfg["lib_name"],
        lib_path=root / cfg["lib_path"],
        nbs_path=root / cfg["nbs_path"],
        tests_path=root / cfg.get("tests_path", "tests"),
        state_path=root / cfg.get("state_path", ".tito"),
        version=cfg["version"],
        min_python=cfg.get("min_python", "3.10"),
        test_timeout_minutes=_minutes(cfg.get("test_timeout_minutes", "10"), root / SETTINGS_FILE),
    )


def _minutes(text: str, where: Path) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value * 60 < float("inf"):  # NaN or inf would switch the limit off
        raise CourseError(f"{where}: test_timeout_minutes = {text!r} must be a positive number of minutes, e.g. 10.")
    return value


def list_modules(settings: Settings) -> list[CourseModule]:
    """All modules in course order (the order of their numbers)."""
    found = []
    if settings.nbs_path.is_dir():
        for folder in sorted(settings.nbs_path.iterdir()):
            match = MODULE_DIR_PATTERN.match(folder.name)
            notebook = folder / f"{match.group(2)}_dev.py" if match else None
            if match and notebook.is_file():
                found.append(CourseModule(match.group(1), match.group(2), folder, notebook))
    return found


def resolve_module(settings: Settings, name: str) -> CourseModule:
    """Accept "12_attention", "12", "attention" (or a path to the module folder)."""
    modules = list_modules(settings)
    wanted = Path(name).name.strip().lower().removesuffix("_dev.py")
    for module in modules:
        if wanted in (module.key, module.number, module.name, str(int(module.number))):
            return module
    _refuse_missing_notebook(settings, wanted)
    valid = ", ".join(m.key for m in modules) or "(none: the modules/ folder is empty)"
    raise CourseError(f"Unknown module {name!r}. Valid modules: {valid}")


def _refuse_missing_notebook(settings: Settings, wanted: str) -> None:
    """A module whose folder is there but whose notebook was deleted: say so, not "unknown module"."""
    folders = sorted(settings.nbs_path.iterdir()) if settings.nbs_path.is_dir() else []
    for folder in folders:
        match = MODULE_DIR_PATTERN.match(folder.name)
        if match and wanted in (folder.name, match.group(1), match.group(2), str(int(match.group(1)))):
            relpath = (folder / f"{match.group(2)}_dev.py").relative_to(settings.root).as_posix()
            raise CourseError(f"{relpath} is missing (deleted?). `tito status` says how to bring it back: "
                              f"`git checkout -- {relpath}`, or `tito module reset {folder.name} --restore` "
                              "when it has backups.")


def resolve_modules(settings: Settings, names: list[str] | None) -> list[CourseModule]:
    """The named modules, or every module when `names` is empty."""
    return [resolve_module(settings, n) for n in names] if names else list_modules(settings)
