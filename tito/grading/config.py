"""`grading.toml`: each module's weight, the points of its graded cases, and the sandbox's limits.

The file lives in `grading/` (beside the graded cases) or at the course root. Without it
every case counts one point and a module is worth as many points as it has cases.

```toml
hidden_visibility = "after_due_date"   # when Gradescope shows the graded cases' results to students

[limits]                               # per (student, module); these are the defaults
time_s = 600                           # wall clock
cpu_s = 600
memory_mb = 3072                       # address space of each process (RLIMIT_AS)
file_mb = 64                           # the largest file it may write
disk_mb = 512                          # everything it writes together
output_mb = 1                          # what it prints
processes = 128                        # at once, of its own user (and of the whole run, where cgroups allow)
tmp_mb = 64                            # each private /tmp, /var/tmp, /dev/shm, /run/lock (own namespaces)

[modules.01_tensor]
weight = 10                            # the module's points in the total
[modules.01_tensor.points]             # points of a case (grading/01_tensor/cases.py), by its name
"float16" = 2                          # cases not named here count one point each
```

With a `weight`, the module's points are scaled to it: by default its cases share it equally.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from ..course import CourseError, Settings, resolve_module
from ..notebook import read_text
from .sandbox import GiB, MiB, Limits

GRADING_DIR = "grading"  # graded cases and their values, one folder per module, and grading.toml; instructors only
CONFIG_FILE = "grading.toml"
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")  # Gradescope's words
_LIMIT_KEYS = {"time_s": ("wall_s", 1), "cpu_s": ("cpu_s", 1), "memory_mb": ("memory_bytes", MiB),
               "file_mb": ("file_bytes", MiB), "disk_mb": ("disk_bytes", MiB),
               "output_mb": ("output_bytes", MiB), "processes": ("processes", 1), "tmp_mb": ("tmp_bytes", MiB)}
# The largest value of each limit (in its unit): a day of time, what a 64-bit limit holds, a million processes.
_LIMIT_MAX = {"wall_s": 86400, "cpu_s": 86400, "memory_bytes": 2 ** 62, "file_bytes": 2 ** 62, "disk_bytes": 2 ** 62,
              "output_bytes": 2 ** 62, "processes": 10 ** 6, "tmp_bytes": 2 ** 62}
_LIMIT_EXAMPLE = {"time_s": 600, "cpu_s": 600, "memory_mb": 3072, "file_mb": 64, "disk_mb": 512, "output_mb": 1,
                  "processes": 128, "tmp_mb": 64}
DEFAULT_LIMITS = Limits(wall_s=600, cpu_s=600, memory_bytes=3 * GiB)


@dataclass(frozen=True)
class GradingConfig:
    path: Path | None  # the file read, or None (every test one point)
    weights: dict[str, Fraction] = field(default_factory=dict)  # module key -> its points in the total
    points: dict[str, dict[str, Fraction]] = field(default_factory=dict)  # module key -> {key: points}
    hidden_visibility: str = "after_due_date"
    limits: Limits = DEFAULT_LIMITS


def config_path(settings: Settings) -> Path | None:
    """grading/grading.toml or grading.toml at the course root; an error when both exist, or when
    one exists but is not a file (a folder, a link to nothing): never silently one point per test."""
    found = []
    for path in (settings.root / GRADING_DIR / CONFIG_FILE, settings.root / CONFIG_FILE):
        if path.is_file():
            found.append(path)
        elif path.exists() or path.is_symlink():
            what = "a link to nothing" if not path.exists() else "a folder" if path.is_dir() else "not a plain file"
            raise CourseError(f"{path} is {what}, so the points and limits cannot be read from it. Make it the "
                              f"grading file (TOML, see `tito grade --help`) or remove it to count every test one "
                              "point.")
    if len(found) > 1:
        raise CourseError(f"Both {found[0]} and {found[1]} exist: keep one (grading/{CONFIG_FILE}).")
    return found[0] if found else None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value, where: str) -> Fraction:
    """Points or a weight: a finite number, 0 or more."""
    if not _is_number(value) or value < 0:
        raise CourseError(f"{where} must be a number of points, 0 or more, e.g. 10 (found {value!r}).")
    return Fraction(str(value))


def _table(value, where: str, example: str) -> dict:
    if not isinstance(value, dict):
        raise CourseError(f"{where} must be a table, e.g. {example} (found {value!r}).")
    return value


def _visibility(raw: dict, path: Path) -> str:
    visibility = raw.get("hidden_visibility", "after_due_date")
    if not isinstance(visibility, str) or visibility not in VISIBILITIES:
        raise CourseError(f"{path}: hidden_visibility = {visibility!r}; use one of {', '.join(VISIBILITIES)}.")
    return visibility


def _limits(raw: dict, path: Path) -> Limits:
    """[limits]: each a finite positive number within its range (a NaN or inf limit would switch it off)."""
    table = _table(raw.get("limits", {}), f"{path}: [limits]", "[limits] followed by lines like time_s = 600")
    limits = {}
    for key, value in table.items():
        if key not in _LIMIT_KEYS:
            raise CourseError(f"{path}: [limits] {key} is not a limit; the limits are {', '.join(_LIMIT_KEYS)}.")
        name, scale = _LIMIT_KEYS[key]
        largest = _LIMIT_MAX[name] / scale
        whole = name == "processes"
        if (not _is_number(value) or value <= 0 or value > largest
                or (whole and value != int(value)) or int(value * scale) < 1):
            kind = "whole number" if whole else "number"
            raise CourseError(f"{path}: [limits] {key} = {value!r} must be a positive {kind}, at most {largest:g} "
                              f"(e.g. {key} = {_LIMIT_EXAMPLE[key]}).")
        limits[name] = int(value * scale) if name.endswith(("bytes", "processes")) else float(value)
    if "wall_s" in limits and "cpu_s" not in limits:
        limits["cpu_s"] = limits["wall_s"]
    return Limits(**{**DEFAULT_LIMITS.__dict__, **limits})


def _module(settings: Settings, name: str, table, path: Path) -> tuple[str, Fraction | None, dict[str, Fraction]]:
    """[modules.NN_name]: (module key, weight or None, {test key: points})."""
    try:
        key = resolve_module(settings, name).key
    except CourseError as err:
        raise CourseError(f"{path}: [modules.{name}]: {err}") from None
    if not isinstance(table, dict) or set(table) - {"weight", "points"}:
        raise CourseError(f"{path}: [modules.{name}] takes `weight` and a `points` table.")
    weight = _number(table["weight"], f"{path}: [modules.{name}] weight") if "weight" in table else None
    points = _table(table.get("points", {}), f"{path}: [modules.{name}.points]",
                    f'[modules.{name}.points] followed by lines like "tests/{key}" = 7')
    return key, weight, {str(k).strip("/"): _number(v, f"{path}: [modules.{name}.points] {k!r}")
                         for k, v in points.items()}


def load_config(settings: Settings) -> GradingConfig:
    path = config_path(settings)
    if path is None:
        return GradingConfig(None)
    try:
        raw = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as err:
        raise CourseError(f"{path}: not valid TOML: {err}") from err
    except CourseError as err:  # cannot be read, or not UTF-8: an error, never the defaults
        raise CourseError(f"{err} Fix {path} or remove it to count every test one point.") from None
    unknown = set(raw) - {"hidden_visibility", "limits", "modules"}
    if unknown:
        raise CourseError(f"{path}: unknown setting(s) {', '.join(sorted(unknown))}; "
                          "expected hidden_visibility, [limits] and [modules.NN_name].")
    visibility = _visibility(raw, path)
    limits = _limits(raw, path)
    weights: dict[str, Fraction] = {}
    points: dict[str, dict[str, Fraction]] = {}
    modules = _table(raw.get("modules", {}), f"{path}: modules", "[modules.01_tensor] followed by weight = 10")
    for name, table in modules.items():
        key, weight, points[key] = _module(settings, name, table, path)
        if weight is not None:
            weights[key] = weight
    return GradingConfig(path, weights, points, visibility, limits)


def points_per_case(config: GradingConfig, module: str, cases: list[str]) -> dict[str, Fraction]:
    """Each graded case's points in the module's total (the weight applied); a key naming no case is an error."""
    keys = config.points.get(module, {})
    unknown = sorted(k for k in keys if k not in cases)
    if unknown:
        where = config.path or CONFIG_FILE
        raise CourseError(f"{where}: [modules.{module}.points] {unknown[0]!r} is not a graded case of {module} "
                          f"(its cases: {', '.join(cases)}).")
    points = {case: keys.get(case, Fraction(1)) for case in cases}
    weight = config.weights.get(module)
    total = sum(points.values(), Fraction(0))
    if weight is not None and total:
        points = {case: p * weight / total for case, p in points.items()}
    return points
