"""The mistakes catalogue: the errors students really make, each proved to be caught.

Every module keeps `modules/NN_name/mistakes.toml` next to its notebook (instructors
only: it quotes the reference solution, so the student edition never carries it).
Each entry is one small change to a solution block:

```toml
[[mistake]]
name = "sum-upcasts"                       # short, unique in the module
what = "sum computes in float64"           # the mistake, as an instructor would describe it
find = '''
        data = xp.sum(self.data, axis=axes, keepdims=keepdims)
'''
replace = '''
        data = xp.sum(self.data, axis=axes, keepdims=keepdims, dtype=np.float64)
'''
message = "keep the input's dtype"         # text the failing test must print (names the cause)
```

`find` must occur exactly once in the notebook and lie inside a solution block, or in
the decorators and `def` line of a function that holds one (mistakes are what students
write, and how their kernel is compiled, `@kernel(fastmath=True)`, is theirs to change).
`tito release check` applies each mistake to a
scratch copy of the course, exports that module and runs the module's pytest tests
with `-x`: the mistake is *caught* when a test fails and the failure output contains
`message`, so the student who makes it is told why.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from .course import CourseError, CourseModule
from .notebook import find_solution_blocks, function_head, read_text

CATALOGUE_FILE = "mistakes.toml"
MIN_MISTAKES = 8  # every module with solution blocks catalogues at least this many
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_FIELDS = ("name", "what", "find", "replace", "message")


@dataclass(frozen=True)
class Mistake:
    module: str  # module key, e.g. "01_tensor"
    name: str
    what: str
    find: str
    replace: str
    message: str

    def apply(self, text: str) -> str:
        """The notebook text with this mistake made (the catalogue was checked: one match)."""
        return text.replace(self.find, self.replace, 1)


def catalogue_path(module: CourseModule) -> Path:
    return module.folder / CATALOGUE_FILE


def _block_text(value: str) -> str:
    """A TOML multi-line string as code lines: the first newline after ''' is TOML's own."""
    return value[1:] if value.startswith("\n") else value


def load_catalogue(module: CourseModule) -> list[Mistake]:
    """The module's mistakes, each checked against its notebook; [] when it has no catalogue.

    Raises CourseError naming the file and the entry for anything that would make the
    check meaningless: a missing field, a duplicate name, a `find` that does not occur
    exactly once or lies outside every solution block, or a change that changes nothing.
    """
    path = catalogue_path(module)
    if not path.is_file():
        return []
    try:
        raw = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as err:
        raise CourseError(f"{path}: not valid TOML: {err}") from err
    text = read_text(module.notebook)
    blocks = find_solution_blocks(text, module.notebook)
    mistakes: list[Mistake] = []
    for number, entry in enumerate(raw.get("mistake", []), start=1):
        where = f"{path}: mistake {number} ({entry.get('name', 'unnamed')})"
        missing = [f for f in _FIELDS if not isinstance(entry.get(f), str) or not entry.get(f).strip()]
        if missing and missing != ["replace"]:  # an empty replacement (deleting lines) is a mistake too
            raise CourseError(f"{where}: needs the fields {', '.join(missing)}.")
        if not _NAME.match(entry["name"]):
            raise CourseError(f"{where}: the name must be lower-case words joined by '-'.")
        if any(m.name == entry["name"] for m in mistakes):
            raise CourseError(f"{where}: the name is used twice.")
        find, replace = _block_text(entry["find"]), _block_text(entry.get("replace", ""))
        count = text.count(find)
        if count != 1:
            raise CourseError(f"{where}: `find` occurs {count} times in {module.notebook.name}; "
                              "it must occur exactly once (add a neighbouring line to make it unique).")
        if find == replace:
            raise CourseError(f"{where}: `replace` equals `find`, so nothing would change.")
        first = text[: text.index(find)].count("\n") + 1
        last = first + find.rstrip("\n").count("\n")
        heads = [function_head(text, b) for b in blocks]
        if not any(b.begin_line < first and last < b.end_line for b in blocks) \
                and not any(top <= first and last <= def_line for top, def_line in heads):
            raise CourseError(f"{where}: lines {first}-{last} of {module.notebook.name} are not inside "
                              "one solution block (or the decorators and def line of a function holding "
                              "one); a mistake changes what a student writes.")
        mistakes.append(Mistake(module.key, entry["name"], entry["what"].strip(), find, replace,
                                entry["message"]))
    return mistakes
