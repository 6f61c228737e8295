"""Search tokens again for the entries whose text holds a camelCase name.

knowledge.analysis now adds a camelCase name's words to the name ("VectorWeight" → vectorweight,
vector, weight), and a question is analysed the new way, so an entry indexed the old way would
miss a question that names its words. Ingestion reuses an unchanged chunk's tokens, so only this
brings them up to date. On PostgreSQL the postings follow the update (0007's trigger). Each KB
touched moves its content version on, so a process's in-memory index of it rebuilds.
"""

import re

from django.db import migrations
from django.db.models import F

# A lowercase letter or digit before a capital, or an acronym before a capitalised word.
CAMEL_CASE = re.compile(r"[a-z0-9][A-Z]|[A-Z][A-Z][a-z]")
PARENT = 0
BATCH = 500


def _index_text(chunk) -> str:
    # knowledge.indexing.index_text, as of this migration.
    if chunk.level == PARENT or not chunk.section_title:
        return chunk.text
    return f"{chunk.section_title}\n\n{chunk.text}"


def retokenize(apps, schema_editor):
    from knowledge.analysis import analyze

    SearchEntry = apps.get_model("knowledge", "SearchEntry")
    KnowledgeBase = apps.get_model("knowledge", "KnowledgeBase")
    touched: set[int] = set()
    changed = []
    entries = SearchEntry.objects.select_related("chunk").only(
        "tokens", "kb_id", "chunk__text", "chunk__level", "chunk__section_title"
    )
    for entry in entries.iterator(chunk_size=BATCH):
        text = _index_text(entry.chunk)
        if not CAMEL_CASE.search(text):
            continue
        tokens = " ".join(analyze(text))
        if tokens != entry.tokens:
            entry.tokens = tokens
            changed.append(entry)
            touched.add(entry.kb_id)
        if len(changed) >= BATCH:
            SearchEntry.objects.bulk_update(changed, ["tokens"])
            changed = []
    if changed:
        SearchEntry.objects.bulk_update(changed, ["tokens"])
    # No change record for the bump: a process then rebuilds the KB's index whole.
    KnowledgeBase.objects.filter(pk__in=touched).update(content_version=F("content_version") + 1)


class Migration(migrations.Migration):

    dependencies = [
        ("knowledge", "0014_unit_vectors"),
    ]

    operations = [
        migrations.RunPython(retokenize, migrations.RunPython.noop, elidable=True),
    ]
