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

import sys
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from .course import CourseError, Settings, resolve_module
from .notebook import read_text
from .sandbox import GiB, MiB, Limits

GRADING_DIR = "grading"  # graded cases and their values, one folder per module, and grading.toml; instructors only
CONFIG_FILE = "grading.toml"
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")  # Gradescope's words
_LIMIT_KEYS = {"time_s": ("wall_s", 1), "cpu_s": ("cpu_s", 1), "memory_mb": ("memory_bytes", MiB),
               "file_mb": ("file_bytes", MiB), "disk_mb": ("disk_bytes", MiB),
               "output_mb": ("output_bytes", MiB), "processes": ("processes", 1), "tmp_mb": ("tmp_bytes", MiB)}
DEFAULT_LIMITS = Limits(wall_s=600, cpu_s=600, memory_bytes=3 * GiB)


@dataclass(frozen=True)
class GradingConfig:
    path: Path | None  # the file read, or None (every test one point)
    weights: dict[str, Fraction] = field(default_factory=dict)  # module key -> its points in the total
    points: dict[str, dict[str, Fraction]] = field(default_factory=dict)  # module key -> {key: points}
    hidden_visibility: str = "after_due_date"
    limits: Limits = DEFAULT_LIMITS


def config_path(settings: Settings) -> Path | None:
    """grading/grading.toml or grading.toml at the course root; an error when both exist."""
    found = [p for p in (settings.root / GRADING_DIR / CONFIG_FILE, settings.root / CONFIG_FILE) if p.is_file()]
    if len(found) > 1:
        raise CourseError(f"Both {found[0]} and {found[1]} exist: keep one (grading/{CONFIG_FILE}).")
    return found[0] if found else None


def _number(value, where: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise CourseError(f"{where} must be a number of points, 0 or more (found {value!r}).")
    return Fraction(str(value))


def load_config(settings: Settings) -> GradingConfig:
    path = config_path(settings)
    if path is None:
        return GradingConfig(None)
    try:
        raw = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as err:
        raise CourseError(f"{path}: not valid TOML: {err}") from err
    unknown = set(raw) - {"hidden_visibility", "limits", "modules"}
    if unknown:
        raise CourseError(f"{path}: unknown setting(s) {', '.join(sorted(unknown))}; "
                          "expected hidden_visibility, [limits] and [modules.NN_name].")
    visibility = raw.get("hidden_visibility", "after_due_date")
    if visibility not in VISIBILITIES:
        raise CourseError(f"{path}: hidden_visibility = {visibility!r}; use one of {', '.join(VISIBILITIES)}.")
    limits = {}
    for key, value in raw.get("limits", {}).items():
        if key not in _LIMIT_KEYS:
            raise CourseError(f"{path}: [limits] {key} is not a limit; the limits are {', '.join(_LIMIT_KEYS)}.")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise CourseError(f"{path}: [limits] {key} = {value!r} must be a positive number.")
        name, scale = _LIMIT_KEYS[key]
        limits[name] = int(value * scale) if name.endswith(("bytes", "processes")) else float(value)
    if "wall_s" in limits and "cpu_s" not in limits:
        limits["cpu_s"] = limits["wall_s"]
    weights: dict[str, Fraction] = {}
    points: dict[str, dict[str, Fraction]] = {}
    for name, table in raw.get("modules", {}).items():
        try:
            key = resolve_module(settings, name).key
        except CourseError as err:
            raise CourseError(f"{path}: [modules.{name}]: {err}") from None
        if not isinstance(table, dict) or set(table) - {"weight", "points"}:
            raise CourseError(f"{path}: [modules.{name}] takes `weight` and a `points` table.")
        if "weight" in table:
            weights[key] = _number(table["weight"], f"{path}: [modules.{name}] weight")
        points[key] = {str(k).strip("/"): _number(v, f"{path}: [modules.{name}.points] {k!r}")
                       for k, v in table.get("points", {}).items()}
    defaults = DEFAULT_LIMITS.__dict__
    return GradingConfig(path, weights, points, visibility, Limits(**{**defaults, **limits}))


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
