"""``python -m autogen_shared_memory``: the ``autogen-shared-memory`` command-line tool (see :mod:`.cli`)."""

from .cli import main

if __name__ == "__main__":
    main()
