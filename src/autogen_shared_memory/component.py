"""AutoGen's declarative-component classes (``Component``, ``ComponentBase``, ``ComponentLoader``,
``ComponentModel``), loaded without the rest of ``autogen_core``.

``import autogen_core`` loads its agent runtime, model and tool types and telemetry: about 0.25 s of every
process's start on a 2-core machine, and a CLI command or a worker that only stores and searches needs none of
it. The component classes live in one self-contained module, ``autogen_core._component_config`` (it imports only
pydantic and typing). It is loaded here on its own and registered under its real name, so a later
``import autogen_core`` reuses it: the classes are the same objects either way, and AutoGen's
``ComponentLoader.load_component`` accepts this package's components. If that module is missing or does not load
on its own, the whole package is imported as before.
"""

from __future__ import annotations

import importlib
import importlib._bootstrap
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_MODULE = "autogen_core._component_config"


def _load_alone() -> ModuleType | None:
    package = importlib.util.find_spec("autogen_core")
    locations = list(package.submodule_search_locations or []) if package is not None else []
    if not locations:
        return None
    path = Path(locations[0]) / "_component_config.py"
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    if spec is None or spec.loader is None or not path.is_file():
        return None
    # importlib's own loader (in every CPython since 3.4) runs the module under its per-module import lock:
    # another thread importing autogen_core meanwhile waits for it instead of seeing it half-initialised.
    load = getattr(importlib._bootstrap, "_load", None)
    try:
        if load is not None:
            module: ModuleType = load(spec)
            return module
        module = importlib.util.module_from_spec(spec)
        sys.modules[_MODULE] = module
        spec.loader.exec_module(module)
        return module
    except Exception:
        sys.modules.pop(_MODULE, None)
        return None


def component_module() -> ModuleType:
    """``autogen_core._component_config``: the one already loaded, else loaded alone, else with its package."""
    loaded = sys.modules.get(_MODULE)
    if loaded is not None:
        return loaded
    if "autogen_core" not in sys.modules:
        alone = _load_alone()
        if alone is not None:
            return alone
    return importlib.import_module(_MODULE)


if TYPE_CHECKING:
    from autogen_core import Component, ComponentBase, ComponentLoader, ComponentModel
else:
    _module = component_module()
    Component = _module.Component
    ComponentBase = _module.ComponentBase
    ComponentLoader = _module.ComponentLoader
    ComponentModel = _module.ComponentModel

__all__ = ["Component", "ComponentBase", "ComponentLoader", "ComponentModel", "component_module"]
