"""The check kinds: every module of this package that defines ``KIND`` is one.

The registry is read from the package's files, so a new kind is one new module here (see
docs/ARCHITECTURE.md, "A new check kind"). ``pytest_configure`` registers each module as a
plugin so that pytest finds the fixture it defines.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_llmperf.plugin.kinds.base import CheckKind


@functools.cache
def kind_modules() -> tuple[ModuleType, ...]:
    """The kinds' modules, in run order (points first, A/B last)."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "KIND"):
            found.append(module)
    return tuple(sorted(found, key=lambda m: m.KIND.order))


def kinds() -> tuple[CheckKind, ...]:
    return tuple(m.KIND for m in kind_modules())


def fixtures() -> tuple[str, ...]:
    """The fixtures a perf test asks for, one per kind."""
    return tuple(k.fixture for k in kinds())


def item_kind(item: Any) -> tuple[CheckKind, Any] | None:
    """The kind and parameter of a collected perf test; None for any other test, and for the
    skipped placeholder of a kind with nothing to parametrize over."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for kind in kinds():
        if kind.fixture in callspec.params:
            param = callspec.params[kind.fixture]
            return None if param is None else (kind, param)
    return None
