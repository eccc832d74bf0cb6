"""Framework adapters, found by registration: the façade imports none of them.

An adapter is a module that defines ``Adapter``, a class following
:class:`~autogen_shared_memory.integration.attacher.FrameworkAdapter` (``Adapter(engine)``: one per store):

* ``claims(target)`` (static): whether a team, an agent or a list of agents belongs to its framework;
* ``agents(target)``: the target's agents;
* ``bind(agent, binding)``: bind one agent, returning the record of what it did (agent_name, group_id,
  agent_id, mode);
* ``unbind(agent, record)``: take that back;

and one generic :class:`~autogen_shared_memory.integration.attacher.Attacher` does the rest for every
framework (unique names, the group and identities, "bound elsewhere" checks, all or nothing, the undo
registry, membership and the agent directory). The three built-in adapters (AutoGen agentchat, Microsoft
Agent Framework, AG2) are listed in :data:`BUILT_IN`; a third-party package adds one through the
``autogen_shared_memory.adapters`` entry point group (``name = "package.module"``). An adapter, and the
generic attacher, are imported the first time a target of its framework is attached, so a process that only
stores and searches never imports a framework; this module names them only by their module paths.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from types import ModuleType
from typing import Any

from .errors import InvalidInputTypeError

__all__ = ["BUILT_IN", "ENTRY_POINT_GROUP", "GENERIC_ATTACHER", "adapter", "attacher", "framework_of", "registered"]

ENTRY_POINT_GROUP = "autogen_shared_memory.adapters"
GENERIC_ATTACHER = "autogen_shared_memory.integration.attacher"  # the module of the one generic Attacher

# framework name -> (adapter module, the top-level packages whose classes it claims)
BUILT_IN: dict[str, tuple[str, tuple[str, ...]]] = {
    "agent_framework": ("autogen_shared_memory.integration.agent_framework", ("agent_framework",)),
    "ag2": ("autogen_shared_memory.integration.ag2", ("autogen",)),
    "autogen": ("autogen_shared_memory.integration.autogen", ("autogen_agentchat", "autogen_core", "autogen_ext")),
}


def registered() -> dict[str, str]:
    """Every adapter this process can use: the built-in ones and those of installed packages.

    Returns:
        Adapter module paths by framework name.
    """
    found = {name: module for name, (module, _) in BUILT_IN.items()}
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(point.name, point.value)
    return found


def framework_of(target: Any) -> str:
    """The framework a team, an agent or a list of agents belongs to.

    A built-in framework is told by the package that defines the target's type or the nearest framework class
    it derives from (an application's own agent subclass belongs to its base's framework); a registered
    third-party adapter is asked through its ``claims``.

    Args:
        target: the team, agent or list of agents.

    Returns:
        The framework's name (``"autogen"`` when nothing else claims it).
    """
    first = target[0] if isinstance(target, (list, tuple)) and target else target
    for cls in type(first).__mro__:
        root = cls.__module__.split(".")[0]
        for name, (_, packages) in BUILT_IN.items():
            if any(root == p or (p != "autogen" and root.startswith(p)) for p in packages):
                return name
    for name in registered():
        if name not in BUILT_IN and _adapter_class(name).claims(target):
            return name
    return "autogen"


def adapter(framework: str) -> ModuleType:
    """The adapter module of a framework, imported on first use.

    Args:
        framework: a name from :func:`registered`.

    Returns:
        The module.

    Raises:
        InvalidInputTypeError: no adapter is registered under that name.
    """
    module = registered().get(framework)
    if module is None:
        raise InvalidInputTypeError(f"no shared-memory adapter for {framework!r}; registered: {sorted(registered())}")
    return importlib.import_module(module)


def _adapter_class(framework: str) -> Any:
    """The ``Adapter`` class of a framework's adapter module."""
    module = adapter(framework)
    cls = getattr(module, "Adapter", None)
    if cls is None:
        raise InvalidInputTypeError(
            f"the shared-memory adapter module {module.__name__!r} of {framework!r} defines no Adapter class"
        )
    return cls


def attacher(framework: str, engine: Any) -> Any:
    """A new generic attacher for one store and one framework: it remembers what it attached, so that detach
    removes exactly that.

    Args:
        framework: a name from :func:`registered`.
        engine: the store's engine (a ``FactStore``).

    Returns:
        The :class:`~autogen_shared_memory.integration.attacher.Attacher` with the framework's adapter.

    Raises:
        InvalidInputTypeError: no adapter is registered under that name, or its module defines no ``Adapter``.
    """
    cls = _adapter_class(framework)
    return importlib.import_module(GENERIC_ATTACHER).Attacher(engine, cls(engine))
