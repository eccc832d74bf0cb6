"""``autogen-shared-memory ui``: a local web inspector of a memory store (the ``[ui]`` extra).

:func:`~.data.open_inspector` opens a store for it (read-only on SQLite), :func:`~.app.create_app` makes the
Starlette app; ``autogen-shared-memory ui`` runs it with uvicorn on 127.0.0.1. See docs/ui.md.
"""

from __future__ import annotations

from .app import create_app
from .data import Inspector, open_inspector

__all__ = ["Inspector", "create_app", "open_inspector"]
