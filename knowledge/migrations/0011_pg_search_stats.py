"""PostgreSQL only: the row count, token count and dimension of each KB level's entries, kept by triggers.

The keyword leg needs a KB level's entry count (N) and mean length in tokens (avgdl), and
the vector leg its dimension. Counted from the entries they took a scan that parsed every
row's tokens: 150-340 ms at 10k generated chunks, paid by the first query after any
content change. `knowledge_searchstats` holds them instead, append-only like a ledger:
each statement on the entries adds one row per (KB, level, embedder) it touched, with the
entries and tokens it added (+) or removed (-), so concurrent ingestions never wait on each
other's rows; a level's figures are the sums of its rows, and every 16th content version
folds the KB's rows into one per level and embedder.
"""

from importlib import import_module

from django.db import migrations

TABLE = """
CREATE TABLE IF NOT EXISTS knowledge_searchstats (
    kb_id bigint NOT NULL,
    level smallint NOT NULL,
    embedder varchar(100) NOT NULL,
    dims integer NOT NULL,
    entries bigint NOT NULL,
    tokens bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS knowledge_searchstats_level ON knowledge_searchstats (kb_id, level, embedder);
"""

# An entry's length as the keyword leg counts it (dl): its non-empty space-separated tokens.
TOKENS = "cardinality(array_remove(string_to_array({row}.tokens, ' '), ''))"

FUNCTIONS = """
CREATE OR REPLACE FUNCTION knowledge_searchentry_indexed() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM knowledge_search_index(ARRAY(SELECT id FROM new_entries));
        INSERT INTO knowledge_searchstats (kb_id, level, embedder, dims, entries, tokens)
        SELECT n.kb_id, n.level, n.embedder, max(n.dims), count(*), coalesce(sum({new_tokens}), 0)
        FROM new_entries n GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM knowledge_search_unindex(ARRAY(SELECT id FROM old_entries));
        INSERT INTO knowledge_searchstats (kb_id, level, embedder, dims, entries, tokens)
        SELECT o.kb_id, o.level, o.embedder, max(o.dims), -count(*), -coalesce(sum({old_tokens}), 0)
        FROM old_entries o GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'UPDATE' THEN
        -- Only rows whose searchable part changed (a new vector alone changes nothing here).
        PERFORM knowledge_search_unindex(ARRAY(
            SELECT o.id FROM old_entries o JOIN new_entries n ON n.id = o.id
            WHERE (o.tokens, o.kb_id, o.level, o.embedder, o.chunk_id)
                  IS DISTINCT FROM (n.tokens, n.kb_id, n.level, n.embedder, n.chunk_id)
        ));
        PERFORM knowledge_search_index(ARRAY(
            SELECT n.id FROM old_entries o JOIN new_entries n ON n.id = o.id
            WHERE (o.tokens, o.kb_id, o.level, o.embedder, o.chunk_id)
                  IS DISTINCT FROM (n.tokens, n.kb_id, n.level, n.embedder, n.chunk_id)
        ));
        INSERT INTO knowledge_searchstats (kb_id, level, embedder, dims, entries, tokens)
        SELECT kb_id, level, embedder, max(dims), sum(entries), sum(tokens) FROM (
            SELECT o.kb_id, o.level, o.embedder, o.dims, -1 AS entries, -{old_tokens} AS tokens
            FROM old_entries o JOIN new_entries n ON n.id = o.id
            WHERE (o.tokens, o.kb_id, o.level, o.embedder, o.dims) IS DISTINCT FROM (n.tokens, n.kb_id, n.level, n.embedder, n.dims)
            UNION ALL
            SELECT n.kb_id, n.level, n.embedder, n.dims, 1, {new_tokens}
            FROM old_entries o JOIN new_entries n ON n.id = o.id
            WHERE (o.tokens, o.kb_id, o.level, o.embedder, o.dims) IS DISTINCT FROM (n.tokens, n.kb_id, n.level, n.embedder, n.dims)
        ) changed GROUP BY 1, 2, 3;
    ELSE
        TRUNCATE knowledge_searchposting, knowledge_searchstats;
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

-- Folds a KB's rows into one per level and embedder (dropping levels no entry holds any more).
-- Deleting and reinserting the same rows keeps every sum, even beside a concurrent call.
CREATE OR REPLACE FUNCTION knowledge_searchstats_fold(kb bigint) RETURNS void AS $$
    WITH folded AS (
        DELETE FROM knowledge_searchstats s WHERE s.kb_id = kb
        RETURNING s.level, s.embedder, s.dims, s.entries, s.tokens
    )
    INSERT INTO knowledge_searchstats (kb_id, level, embedder, dims, entries, tokens)
    SELECT kb, level, embedder, max(dims), sum(entries), sum(tokens) FROM folded
    GROUP BY 1, 2, 3 HAVING sum(entries) <> 0
$$ LANGUAGE sql;

CREATE OR REPLACE FUNCTION knowledge_knowledgebase_searchstats() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM knowledge_searchstats WHERE kb_id = OLD.id;
    ELSIF mod(NEW.content_version, 16) = 0 THEN
        PERFORM knowledge_searchstats_fold(NEW.id);
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
""".format(new_tokens=TOKENS.format(row="n"), old_tokens=TOKENS.format(row="o"))

TRIGGERS = """
CREATE TRIGGER knowledge_knowledgebase_searchstats_fold
    AFTER UPDATE OF content_version ON knowledge_knowledgebase
    FOR EACH ROW EXECUTE FUNCTION knowledge_knowledgebase_searchstats();
CREATE TRIGGER knowledge_knowledgebase_searchstats_delete AFTER DELETE ON knowledge_knowledgebase
    FOR EACH ROW EXECUTE FUNCTION knowledge_knowledgebase_searchstats();
"""

BACKFILL = """
INSERT INTO knowledge_searchstats (kb_id, level, embedder, dims, entries, tokens)
SELECT n.kb_id, n.level, n.embedder, max(n.dims), count(*), coalesce(sum({tokens}), 0)
FROM knowledge_searchentry n GROUP BY 1, 2, 3
""".format(tokens=TOKENS.format(row="n"))


def _drop_triggers(schema_editor) -> None:
    for name in ("fold", "delete"):
        schema_editor.execute(
            f"DROP TRIGGER IF EXISTS knowledge_knowledgebase_searchstats_{name} ON knowledge_knowledgebase"
        )


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(TABLE)
    schema_editor.execute(FUNCTIONS)
    _drop_triggers(schema_editor)
    schema_editor.execute(TRIGGERS)
    schema_editor.execute("DELETE FROM knowledge_searchstats")
    schema_editor.execute(BACKFILL)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    _drop_triggers(schema_editor)
    schema_editor.execute("DROP FUNCTION IF EXISTS knowledge_knowledgebase_searchstats()")
    schema_editor.execute("DROP FUNCTION IF EXISTS knowledge_searchstats_fold(bigint)")
    schema_editor.execute(import_module("knowledge.migrations.0010_postings_only").POSTINGS_ONLY)  # the entry trigger without the stats
    schema_editor.execute("DROP TABLE IF EXISTS knowledge_searchstats")


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0010_postings_only"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
