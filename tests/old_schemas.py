"""What older schemas had and the current one dropped: tests rebuild them to check the migrations."""

SCHEMA_4_FACTS_FTS = """
CREATE VIRTUAL TABLE facts_fts USING fts5(content, content='facts', content_rowid='seq',
    tokenize='porter unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE facts_vocab USING fts5vocab(facts_fts, 'row');
CREATE TRIGGER facts_ai AFTER INSERT ON facts BEGIN
    INSERT INTO facts_fts (rowid, content) VALUES (new.seq, new.content); END;
CREATE TRIGGER facts_ad AFTER DELETE ON facts BEGIN
    INSERT INTO facts_fts (facts_fts, rowid, content) VALUES ('delete', old.seq, old.content); END;
"""
FACTS_FTS = (
    "SELECT name FROM sqlite_master WHERE name GLOB 'facts_fts*' OR name IN ('facts_vocab', 'facts_ai', 'facts_ad')"
)
