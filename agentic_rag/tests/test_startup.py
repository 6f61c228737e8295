"""Daphne resumes interrupted background work as it starts, with no request sent to it.

Each test starts a real daphne on a copy of a prepared SQLite database (server_support) and
never sends it a request: the server's start alone must finish what the last process left.
"""

from __future__ import annotations

import time
from pathlib import Path

from .server_support import copy_database, query, start, wait_for

# A dead run is taken over after INGESTION_STALE_S without a heartbeat: seconds here, not a minute.
QUICK_LIVENESS = {"INGESTION_STALE_S": "2", "INGESTION_HEARTBEAT_S": "0.2", "INGESTION_SWEEP_S": "0.5"}


def _documents(folder: Path, kb: str, status: str) -> int:
    return query(folder, "SELECT COUNT(*) FROM knowledge_document d JOIN knowledge_knowledgebase k ON k.id = d.kb_id"
                         " WHERE k.slug = ? AND d.status = ?", kb, status)[0][0]


def _total(folder: Path, kb: str) -> int:
    return query(folder, "SELECT COUNT(*) FROM knowledge_document d JOIN knowledge_knowledgebase k ON k.id = d.kb_id"
                         " WHERE k.slug = ?", kb)[0][0]


def _unfinished_jobs(folder: Path) -> int:
    return query(folder, "SELECT COUNT(*) FROM knowledge_ingestionjob WHERE finished_at IS NULL")[0][0]


def _chunks(folder: Path, kb: str) -> int:
    return query(folder, "SELECT COUNT(*) FROM knowledge_chunk c JOIN knowledge_knowledgebase k ON k.id = c.kb_id"
                         " WHERE k.slug = ?", kb)[0][0]


def test_it_ingests_the_documents_a_stopped_server_left_queued_with_no_request(snapshots, tmp_path, servers):
    folder = copy_database(snapshots, "ingestion-pending", tmp_path)

    server = start(servers, folder)  # listening is all: no request

    wait_for(lambda: _documents(folder, "fresh", "ready") == _total(folder, "fresh"),
             timeout=60, what="every queued document ingested", server=server)
    assert _chunks(folder, "fresh") == _chunks(folder, "ready")


def test_it_takes_over_the_ingestion_of_a_killed_server_with_no_request(snapshots, tmp_path, servers):
    folder = copy_database(snapshots, "ingestion-pending", tmp_path)
    server = start(servers, folder, BACKGROUND_BATCH_DELAY_S="0.4", **QUICK_LIVENESS)
    # Killed mid-run, never between two documents: one ready, and the next one's run under way.
    wait_for(lambda: _documents(folder, "fresh", "ready") >= 1 and _unfinished_jobs(folder) == 1,
             timeout=60, what="one document ingested and the next one running", server=server)
    server.kill()  # SIGKILL: no batch boundary, no release; its run still holds a document
    unfinished = query(folder, "SELECT id FROM knowledge_ingestionjob WHERE finished_at IS NULL")
    assert len(unfinished) == 1
    dead_run = unfinished[0][0]

    killed = time.monotonic()
    server = start(servers, folder, **QUICK_LIVENESS)
    wait_for(lambda: _documents(folder, "fresh", "ready") == _total(folder, "fresh"),
             timeout=60, what="every document ingested", server=server)
    print(f"SIGKILL to every document ready: {time.monotonic() - killed:.1f} s")  # with -s, for the notes

    assert _unfinished_jobs(folder) == 0  # the dead run's row ended
    assert _chunks(folder, "fresh") == _chunks(folder, "ready")  # nothing twice
    # Taken over by the sweep ("no heartbeat since …") or by the start's own resume, whichever came
    # first once the heartbeat was stale: either way the dead run's row says it was interrupted.
    # (Only that row is asked about: on a loaded machine a live run that misses its heartbeats
    # for INGESTION_STALE_S is taken over too, and nothing is ingested twice all the same.)
    assert query(folder, "SELECT error FROM knowledge_ingestionjob WHERE id = ?", dead_run)[0][0].startswith("interrupted")
