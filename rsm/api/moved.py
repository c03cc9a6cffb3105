"""Import paths that moved: the old module answers each name from its new home with one DeprecationWarning.

Plugins (record validation and topic management policies) written against a path this package once had
keep loading: `rsm/errors.py` and the other old modules are a few lines each that hand their names to
`moved_names`, which builds the module's `__getattr__` (PEP 562). The warning names the new path and is
given once per name and process: the value is then kept in the old module, so later lookups (and the
second lookup Python's import machinery makes for `from package import name`) find it directly.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping


def moved_names(
    old: str, new_homes: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for module `old`, whose names now live in `new_homes[name]` (a module)."""

    def __getattr__(name: str) -> object:
        new = new_homes.get(name)
        if new is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} is deprecated: import {name} from {new}", DeprecationWarning, stacklevel=2
        )
        value = getattr(importlib.import_module(new), name)
        setattr(sys.modules[old], name, value)  # warned once: later lookups find it here
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[old])) | set(new_homes))

    return __getattr__, __dir__
