"""The search pipeline, stage by stage, as plain functions and small classes tested directly.

``text`` (query words and stems, as FTS5 sees them) -> ``lexical`` (which terms to score, BM25 across files)
and ``int8`` / ``index`` (vector codes with exact error bounds, the per-scope index, HNSW, near duplicates)
-> ``fusion`` (Reciprocal Rank Fusion). Backends run the SQL; nothing here imports a backend.
"""
