"""PostgreSQL only: the keyword leg reads postings alone, so the SQL ranking goes.

Since the keyword leg scores a query's postings in process (knowledge/pg_search.py), no
query calls `knowledge_search_bm25` (MaxScore in PL/pgSQL, migration 0007) and none reads
the document frequencies of `knowledge_searchterm`: a term's df is the length of its
postings. This drops both functions, the df table, the triggers that kept and folded it,
and writes postings alone on each change of the search entries.
"""

from importlib import import_module

from django.db import migrations

POSTINGS_ONLY = """
CREATE OR REPLACE FUNCTION knowledge_search_index(ids bigint[]) RETURNS void AS $$
    INSERT INTO knowledge_searchposting (entry_id, kb_id, level, embedder, term, chunk_id, tf, dl)
    SELECT e.id, e.kb_id, e.level, e.embedder, t.term, e.chunk_id, t.tf, t.dl
    FROM knowledge_searchentry e
    CROSS JOIN LATERAL (
        SELECT term, count(*)::int AS tf, (sum(count(*)) OVER ())::int AS dl
        FROM unnest(string_to_array(e.tokens, ' ')) AS term
        WHERE term <> ''
        GROUP BY term
    ) AS t
    WHERE e.id = ANY(ids)
$$ LANGUAGE sql;

CREATE OR REPLACE FUNCTION knowledge_search_unindex(ids bigint[]) RETURNS void AS $$
    DELETE FROM knowledge_searchposting WHERE entry_id = ANY(ids)
$$ LANGUAGE sql;

CREATE OR REPLACE FUNCTION knowledge_searchentry_indexed() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM knowledge_search_index(ARRAY(SELECT id FROM new_entries));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM knowledge_search_unindex(ARRAY(SELECT id FROM old_entries));
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
    ELSE
        TRUNCATE knowledge_searchposting;
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
"""

RANKING_FUNCTIONS = (
    "knowledge_search_bm25(bigint, integer, text, text[], integer[], bigint, float8, bigint[], integer, float8, float8)",
    "knowledge_search_bm25_stages(bigint, integer, text, text[], float8[], bigint[], bigint[], integer, float8,"
    " integer, float8, float8, float8)",
)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in ("compact", "delete"):
        schema_editor.execute(
            f"DROP TRIGGER IF EXISTS knowledge_knowledgebase_searchterms_{name} ON knowledge_knowledgebase"
        )
    schema_editor.execute("DROP FUNCTION IF EXISTS knowledge_knowledgebase_searchterms()")
    schema_editor.execute("DROP FUNCTION IF EXISTS knowledge_searchterm_compact(bigint, integer)")
    for function in RANKING_FUNCTIONS:
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {function}")
    schema_editor.execute(POSTINGS_ONLY)
    schema_editor.execute("DROP TABLE IF EXISTS knowledge_searchterm")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    postings = import_module("knowledge.migrations.0007_pg_postings")
    schema_editor.execute(postings.TABLES)
    schema_editor.execute(postings.FUNCTIONS)
    schema_editor.execute(postings.RANKING)
    postings._drop_triggers(schema_editor)
    schema_editor.execute(postings.TRIGGERS)
    # The df rows the dropped table held, counted again from the postings.
    schema_editor.execute(
        "INSERT INTO knowledge_searchterm (kb_id, level, embedder, term, df)"
        " SELECT kb_id, level, embedder, term, count(*) FROM knowledge_searchposting GROUP BY 1, 2, 3, 4"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0009_content_changes"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
