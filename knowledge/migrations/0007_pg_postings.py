"""PostgreSQL only: an inverted index for the keyword leg, kept by statement triggers.

`knowledge_searchposting` holds one row per (search entry, distinct token): the entry's
KB, level and embedder, the token, its chunk, the token's count in the entry (tf) and the
entry's token count (dl). A btree on (kb, level, embedder, term, chunk) carrying tf and dl
serves a term's postings in one index-only range scan and a (term, chunk) lookup in one
probe, which is all BM25 reads (knowledge/pg_search.py).

`knowledge_search_bm25` ranks a KB level's rows for a query by BM25, exactly, with
MaxScore: a term adds at most its weight (qtf * idf * (k1 + 1)) to a row, so once the
best rows of the rarest terms show a score the answer must reach, the frequent terms
whose weights together stay below it are only looked up for rows holding another term,
and a row is dropped as soon as the terms left could not lift it there. With 10k rows
and a six-word query holding words found in nearly every row, it reads a few thousand
postings instead of 40k (measured in docs/08-deployment.md). PL/pgSQL keeps the plans
of its steps; planning them as one statement per query took 1.4 ms each.

`knowledge_searchterm` gives each term's document frequency without counting postings
(10k tuples for a common term at 10k chunks: 2 ms each). It is append-only: a statement
adds one row per touched term with how many entries it added (+) or removed (-), so
concurrent ingestions never wait on each other's rows; df is the sum of a term's rows,
and `knowledge_searchterm_compact(kb, most)` folds a term's rows into one past `most`.

Triggers on knowledge_searchentry run once per statement over its transition tables, so
a bulk insert indexes its rows in one pass. They replace the term counts (jsonb) and the
GIN index of migrations 0002 and 0004, which nothing reads any more.
"""

from importlib import import_module

from django.db import migrations

TABLES = """
CREATE TABLE IF NOT EXISTS knowledge_searchposting (
    entry_id bigint NOT NULL,
    kb_id bigint NOT NULL,
    level smallint NOT NULL,
    embedder varchar(100) NOT NULL,
    term text NOT NULL,
    chunk_id bigint NOT NULL,
    tf integer NOT NULL,
    dl integer NOT NULL
);
CREATE INDEX IF NOT EXISTS knowledge_searchposting_term
    ON knowledge_searchposting (kb_id, level, embedder, term, chunk_id) INCLUDE (tf, dl);
CREATE INDEX IF NOT EXISTS knowledge_searchposting_entry ON knowledge_searchposting (entry_id);
CREATE TABLE IF NOT EXISTS knowledge_searchterm (
    kb_id bigint NOT NULL,
    level smallint NOT NULL,
    embedder varchar(100) NOT NULL,
    term text NOT NULL,
    df integer NOT NULL
);
CREATE INDEX IF NOT EXISTS knowledge_searchterm_term
    ON knowledge_searchterm (kb_id, level, embedder, term) INCLUDE (df);
"""

# Every content change bumps the KB's content_version (under the KB row's lock). Every
# FOLD_EVERY-th bump folds the terms with more than ROWS_PER_TERM rows, so df sums a few
# dozen rows at most. Folding scans all the KB's term rows: at every bump it took
# ingestion of CMRC2018 dev (43 files) from 102 to 83 child chunks/s.
ROWS_PER_TERM = 8
FOLD_EVERY = 16

FUNCTIONS = """
CREATE OR REPLACE FUNCTION knowledge_search_index(ids bigint[]) RETURNS void AS $$
    WITH added AS (
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
        RETURNING kb_id, level, embedder, term
    )
    INSERT INTO knowledge_searchterm (kb_id, level, embedder, term, df)
    SELECT kb_id, level, embedder, term, count(*) FROM added GROUP BY 1, 2, 3, 4
$$ LANGUAGE sql;

CREATE OR REPLACE FUNCTION knowledge_search_unindex(ids bigint[]) RETURNS void AS $$
    WITH removed AS (
        DELETE FROM knowledge_searchposting WHERE entry_id = ANY(ids)
        RETURNING kb_id, level, embedder, term
    )
    INSERT INTO knowledge_searchterm (kb_id, level, embedder, term, df)
    SELECT kb_id, level, embedder, term, -count(*) FROM removed GROUP BY 1, 2, 3, 4
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
        TRUNCATE knowledge_searchposting, knowledge_searchterm;
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

-- Folds each term's rows of the KB into one (dropping terms no entry holds any more);
-- only terms with more than `most` rows, so a call after each ingestion stays cheap.
-- Deleting and reinserting the same rows keeps every sum, even beside a concurrent call.
CREATE OR REPLACE FUNCTION knowledge_searchterm_compact(kb bigint, most integer) RETURNS void AS $$
    WITH crowded AS (
        SELECT level, embedder, term FROM knowledge_searchterm
        WHERE kb_id = kb GROUP BY level, embedder, term HAVING count(*) > most
    ), folded AS (
        DELETE FROM knowledge_searchterm s USING crowded c
        WHERE s.kb_id = kb AND s.level = c.level AND s.embedder = c.embedder AND s.term = c.term
        RETURNING s.level, s.embedder, s.term, s.df
    )
    INSERT INTO knowledge_searchterm (kb_id, level, embedder, term, df)
    SELECT kb, level, embedder, term, sum(df) FROM folded GROUP BY 1, 2, 3, 4 HAVING sum(df) <> 0
$$ LANGUAGE sql;

CREATE OR REPLACE FUNCTION knowledge_knowledgebase_searchterms() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM knowledge_searchterm WHERE kb_id = OLD.id;
    ELSIF mod(NEW.content_version, %(every)s) = 0 THEN
        PERFORM knowledge_searchterm_compact(NEW.id, %(most)s);
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
""" % {"most": ROWS_PER_TERM, "every": FOLD_EVERY}

# BM25 over the postings, exact, by MaxScore: reading few postings of frequent terms.
RANKING = """
-- The `wanted` best rows of a KB level for query terms counted qtfs times, best first, each
-- with whether its chunk is live; among `only_ids` if not NULL. n_rows and avgdl are the
-- level's row count and mean length in tokens.
CREATE OR REPLACE FUNCTION knowledge_search_bm25(
    kb bigint, lvl integer, emb text, query_terms text[], qtfs integer[], n_rows bigint, avgdl float8,
    only_ids bigint[], wanted integer, k1 float8, b float8
) RETURNS TABLE (chunk_id bigint, score float8, is_live boolean) AS $$
DECLARE
    terms text[];  -- the query's indexed terms, heaviest first
    weights float8[];  -- qtf * idf * (k1 + 1), Lucene's idf: more than the term adds to any row
    dfs bigint[];
    n integer;
    first_terms integer := 0;
    postings bigint := 0;
    most integer := 4 * wanted;
    ids bigint[];
    scores float8[];
    candidates bigint;
    beat float8 := 0;
    essential integer := 1;
BEGIN
    SELECT array_agg(t.term ORDER BY t.weight DESC, t.term), array_agg(t.weight ORDER BY t.weight DESC, t.term),
           array_agg(t.df ORDER BY t.weight DESC, t.term)
    INTO terms, weights, dfs
    FROM (
        SELECT s.term, sum(s.df) AS df, max(q.qtf) * (k1 + 1) * ln(1 + (n_rows - sum(s.df) + 0.5) / (sum(s.df) + 0.5)) AS weight
        FROM unnest(query_terms, qtfs) AS q(term, qtf)
        CROSS JOIN LATERAL (
            SELECT s.term, s.df FROM knowledge_searchterm s
            WHERE s.kb_id = kb AND s.level = lvl AND s.embedder = emb AND s.term = q.term
            OFFSET 0
        ) s
        GROUP BY s.term HAVING sum(s.df) > 0
    ) t;
    n := coalesce(cardinality(terms), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    WHILE first_terms < n AND postings < wanted LOOP
        first_terms := first_terms + 1;
        postings := postings + dfs[first_terms];
    END LOOP;
    IF first_terms = n THEN
        SELECT s.ids, s.scores FROM knowledge_search_bm25_stages(
            kb, lvl, emb, terms, weights, dfs, only_ids, n, 0, NULL, k1, b, avgdl) s INTO ids, scores;
    ELSE
        SELECT s.ids, s.scores, s.candidates FROM knowledge_search_bm25_stages(
            kb, lvl, emb, terms, weights, dfs, only_ids, first_terms, 0, most, k1, b, avgdl) s
            INTO ids, scores, candidates;
        IF cardinality(scores) >= wanted THEN
            -- A hair below: the next pass adds the same numbers in another order.
            SELECT x * (1 - 1e-9) INTO beat FROM unnest(scores) x ORDER BY x DESC OFFSET wanted - 1 LIMIT 1;
        END IF;
        WHILE essential < n AND (SELECT sum(w) FROM unnest(weights[essential + 1:n]) w) >= beat LOOP
            essential := essential + 1;
        END LOOP;
        -- The first pass is the answer only if it scored every candidate of every essential term.
        IF candidates IS NULL OR candidates > most OR essential > first_terms THEN
            SELECT s.ids, s.scores FROM knowledge_search_bm25_stages(
                kb, lvl, emb, terms, weights, dfs, only_ids, essential, beat, NULL, k1, b, avgdl) s
                INTO ids, scores;
        END IF;
    END IF;
    RETURN QUERY
        SELECT r.id, r.score, EXISTS (
            SELECT FROM knowledge_chunk c
            JOIN knowledge_document d ON d.id = c.document_id AND d.live_version = c.version
            WHERE c.id = r.id
        )
        FROM (SELECT * FROM unnest(ids, scores) AS s(id, score) ORDER BY s.score DESC, s.id LIMIT wanted) r
        ORDER BY r.score DESC, r.id;
END
$$ LANGUAGE plpgsql STABLE;

-- Each term's postings come from a range scan of their own (LATERAL ... OFFSET 0): as
-- `term = ANY(...)`, a planner without statistics yet read the KB's every posting.
-- Rows holding one of the first `essential` terms whose score may reach `beat`, in full:
-- the essential terms' postings summed, then each other term added, heaviest first, to
-- the rows its weight and the lighter ones' could still lift that far. A term is looked
-- up row by row (an index probe each) while the rows left are few against its postings,
-- else its postings are read once and joined.
CREATE OR REPLACE FUNCTION knowledge_search_bm25_stages(
    kb bigint, lvl integer, emb text, terms text[], weights float8[], dfs bigint[],
    only_ids bigint[], essential integer, beat float8, most integer, k1 float8, b float8, avgdl float8,
    OUT ids bigint[], OUT scores float8[], OUT candidates bigint
) AS $$
DECLARE
    n integer := cardinality(terms);
    rest float8;
    term_weight float8;
BEGIN
    SELECT coalesce(sum(w), 0) INTO rest FROM unnest(weights[essential + 1:n]) w;
    SELECT array_agg(s.chunk_id), array_agg(s.score), max(s.candidates) INTO ids, scores, candidates FROM (
        SELECT p.chunk_id, sum(q.weight * p.tf / (p.tf + k1 * (1 - b + b * p.dl / avgdl))) AS score,
               count(*) OVER () AS candidates
        FROM unnest(terms[1:essential], weights[1:essential]) AS q(term, weight)
        CROSS JOIN LATERAL (
            SELECT p.chunk_id, p.tf, p.dl FROM knowledge_searchposting p
            WHERE p.kb_id = kb AND p.level = lvl AND p.embedder = emb AND p.term = q.term
              AND (only_ids IS NULL OR p.chunk_id = ANY(only_ids))
            OFFSET 0
        ) p
        GROUP BY p.chunk_id
        HAVING sum(q.weight * p.tf / (p.tf + k1 * (1 - b + b * p.dl / avgdl))) + rest >= beat
        ORDER BY score DESC, p.chunk_id
        LIMIT most
    ) s;
    FOR i IN essential + 1 .. n LOOP
        EXIT WHEN ids IS NULL;
        term_weight := weights[i];
        rest := rest - term_weight;
        IF cardinality(ids) * 8 < dfs[i] THEN
            SELECT array_agg(s.id), array_agg(s.total) INTO ids, scores FROM (
                SELECT s.id, s.score + coalesce(term_weight * p.tf / (p.tf + k1 * (1 - b + b * p.dl / avgdl)), 0) AS total
                FROM unnest(ids, scores) AS s(id, score)
                LEFT JOIN LATERAL (
                    SELECT p.tf, p.dl FROM knowledge_searchposting p
                    WHERE p.kb_id = kb AND p.level = lvl AND p.embedder = emb AND p.term = terms[i] AND p.chunk_id = s.id
                    OFFSET 0  -- kept a subquery, so one probe per row rather than a join
                ) p ON true
            ) s WHERE s.total + rest >= beat;
        ELSE
            SELECT array_agg(s.id), array_agg(s.total) INTO ids, scores FROM (
                SELECT s.id, s.score + coalesce(term_weight * p.tf / (p.tf + k1 * (1 - b + b * p.dl / avgdl)), 0) AS total
                FROM unnest(ids, scores) AS s(id, score)
                LEFT JOIN (
                    SELECT p.chunk_id, p.tf, p.dl FROM knowledge_searchposting p
                    WHERE p.kb_id = kb AND p.level = lvl AND p.embedder = emb AND p.term = terms[i]
                    OFFSET 0
                ) p ON p.chunk_id = s.id
            ) s WHERE s.total + rest >= beat;
        END IF;
    END LOOP;
END
$$ LANGUAGE plpgsql STABLE;
"""

TRIGGERS = """
CREATE TRIGGER knowledge_searchentry_indexed_insert AFTER INSERT ON knowledge_searchentry
    REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_searchentry_indexed();
CREATE TRIGGER knowledge_searchentry_indexed_update AFTER UPDATE ON knowledge_searchentry
    REFERENCING OLD TABLE AS old_entries NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_searchentry_indexed();
CREATE TRIGGER knowledge_searchentry_indexed_delete AFTER DELETE ON knowledge_searchentry
    REFERENCING OLD TABLE AS old_entries
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_searchentry_indexed();
CREATE TRIGGER knowledge_searchentry_indexed_truncate AFTER TRUNCATE ON knowledge_searchentry
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_searchentry_indexed();
CREATE TRIGGER knowledge_knowledgebase_searchterms_compact
    AFTER UPDATE OF content_version ON knowledge_knowledgebase
    FOR EACH ROW EXECUTE FUNCTION knowledge_knowledgebase_searchterms();
CREATE TRIGGER knowledge_knowledgebase_searchterms_delete AFTER DELETE ON knowledge_knowledgebase
    FOR EACH ROW EXECUTE FUNCTION knowledge_knowledgebase_searchterms();
"""

TRIGGER_NAMES = ("insert", "update", "delete", "truncate")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(TABLES)
    schema_editor.execute(FUNCTIONS)
    schema_editor.execute(RANKING)
    _drop_triggers(schema_editor)
    schema_editor.execute(TRIGGERS)
    _index_existing_rows(schema_editor)
    schema_editor.execute("DROP TRIGGER IF EXISTS knowledge_searchentry_term_counts ON knowledge_searchentry")
    schema_editor.execute("DROP FUNCTION IF EXISTS knowledge_searchentry_term_counts()")
    schema_editor.execute("ALTER TABLE knowledge_searchentry DROP COLUMN IF EXISTS term_counts")
    schema_editor.execute("DROP INDEX IF EXISTS knowledge_searchentry_fts")
    # Index-only scans need the visibility map set; the planner needs the new row counts.
    schema_editor.execute("VACUUM ANALYZE knowledge_searchposting, knowledge_searchterm")


def _index_existing_rows(schema_editor, batch: int = 5000) -> None:
    """Index existing rows a batch at a time (each batch commits alone), then fold df."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(min(id), 0), coalesce(max(id), -1) FROM knowledge_searchentry")
        low, high = cursor.fetchone()
        for start in range(low, high + 1, batch):
            cursor.execute(
                "SELECT knowledge_search_index(ARRAY(SELECT id FROM knowledge_searchentry"
                " WHERE id >= %s AND id < %s AND NOT EXISTS"
                " (SELECT FROM knowledge_searchposting p WHERE p.entry_id = knowledge_searchentry.id)))",
                [start, start + batch],
            )
        cursor.execute("SELECT DISTINCT kb_id FROM knowledge_searchterm")
        for (kb_id,) in cursor.fetchall():
            cursor.execute("SELECT knowledge_searchterm_compact(%s, 1)", [kb_id])


def _drop_triggers(schema_editor) -> None:
    for name in TRIGGER_NAMES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS knowledge_searchentry_indexed_{name} ON knowledge_searchentry")
    for name in ("compact", "delete"):
        schema_editor.execute(
            f"DROP TRIGGER IF EXISTS knowledge_knowledgebase_searchterms_{name} ON knowledge_knowledgebase"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    _drop_triggers(schema_editor)
    for function in ("knowledge_searchentry_indexed()", "knowledge_knowledgebase_searchterms()",
                     "knowledge_search_index(bigint[])", "knowledge_search_unindex(bigint[])",
                     "knowledge_searchterm_compact(bigint, integer)",
                     "knowledge_search_bm25(bigint, integer, text, text[], integer[], bigint, float8, bigint[], integer,"
                     " float8, float8)",
                     "knowledge_search_bm25_stages(bigint, integer, text, text[], float8[], bigint[], bigint[], integer,"
                     " float8, integer, float8, float8, float8)"):
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {function}")
    schema_editor.execute("DROP TABLE IF EXISTS knowledge_searchposting, knowledge_searchterm")
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS knowledge_searchentry_fts ON knowledge_searchentry "
        "USING gin (to_tsvector('simple', tokens))"
    )
    # What 0004 built (term counts, their trigger, GIN without a pending list), built again.
    import_module("knowledge.migrations.0004_pg_term_counts").forwards(apps, schema_editor)


class Migration(migrations.Migration):
    # Batches of the backfill commit one by one; VACUUM cannot run in a transaction.
    atomic = False

    dependencies = [
        ("knowledge", "0006_backfill_document_versions"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
