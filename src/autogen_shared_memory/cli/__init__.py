"""``autogen-shared-memory``: inspect and manage a memory store from the command line (Typer + Rich).

:mod:`.app` holds the app and what commands share; each other module is a group of commands, thin wrappers
over library calls. Importing this package registers them all on :data:`app`.
"""

from __future__ import annotations

# The command modules register their commands on import, in this order: the order of `--help`.
from . import facts, records, admin, doctor, mcp, ui  # isort: skip
from .app import Settings, app, main

__all__ = ["Settings", "admin", "app", "doctor", "facts", "main", "mcp", "records", "ui"]
