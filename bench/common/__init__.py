"""Helpers shared by the benchmark scripts (``python bench/<name>.py`` puts ``bench/`` on ``sys.path``)."""
