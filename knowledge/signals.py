"""Signals other apps listen to; knowledge comes first in the dependency chain and calls no one."""

from __future__ import annotations

from django.dispatch import Signal

# Sent when a document version became live (status ready), with `document`; the graph app
# updates the KB's graph from it.
document_ingested = Signal()
