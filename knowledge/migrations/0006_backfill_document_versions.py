"""Keep the bytes every document has now as its current version's row.

Only the newest bytes were stored before versions were kept, so each document starts its
history with one row: the version it is at, dated when that version was first queued.
"""

import hashlib

from django.db import migrations


def backfill(apps, schema_editor):
    DocumentFile = apps.get_model("knowledge", "DocumentFile")
    DocumentVersion = apps.get_model("knowledge", "DocumentVersion")
    IngestionJob = apps.get_model("knowledge", "IngestionJob")
    # One file at a time: the bytes of a whole knowledge base may not fit in memory.
    for stored in DocumentFile.objects.select_related("document").iterator(chunk_size=50):
        document, data = stored.document, bytes(stored.data)
        first_job = IngestionJob.objects.filter(document=document, version=document.version).order_by("started_at").first()
        DocumentVersion.objects.get_or_create(
            document=document,
            version=document.version,
            defaults={
                "data": data,
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "created_at": first_job.started_at if first_job else document.updated_at,
                "created_by_id": document.uploaded_by_id if document.version == 1 else None,
            },
        )


class Migration(migrations.Migration):

    dependencies = [
        ("knowledge", "0005_document_versions"),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
