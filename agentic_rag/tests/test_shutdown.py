"""SIGTERM ends daphne within STOP_WITHIN_S in every state, and stopped work resumes whole.

Each test starts a real daphne on a copy of a prepared SQLite database (server_support),
puts it in one state, sends SIGTERM and times the exit. Work stopped half-way is checked
after the next start against a clean run: the same chunks, entries and graph, no more.
BACKGROUND_BATCH_DELAY_S (a test-only setting) holds ingestion and graph builds half-way.
"""

from __future__ import annotations

import http.client
import json
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

from agentic_rag.llm.testing import FakeOpenAIServer, FakeReply

from .server_support import Server, copy_database, query, start, wait_for

STOP_WITHIN_S = 10  # what a container stop (docker's default) waits before SIGKILL
HOLD = {"BACKGROUND_BATCH_DELAY_S": "0.4"}
FORCED = "exiting by force"


def stop_in_time(server: Server) -> float:
    seconds = server.terminate()
    print(f"SIGTERM to exit: {seconds:.2f} s")  # shown with -s: the figures of the closing notes
    assert seconds < STOP_WITHIN_S, f"daphne took {seconds:.1f} s to stop:\n{server.log()}"
    return seconds


def test_it_stops_mid_ingestion_and_ingests_each_document_once_on_the_next_start(snapshots, tmp_path, servers):
    folder = copy_database(snapshots, "ingestion-pending", tmp_path)
    server = start(servers, folder, **HOLD)
    server.get("/login/")  # the first request resumes the uploaded documents
    wait_for(lambda: _documents(folder, "fresh", "ready") >= 1, timeout=30, what="one document ingested", server=server)

    stop_in_time(server)

    assert FORCED not in server.log()  # the ingestion stopped at a stage boundary
    assert _documents(folder, "fresh", "ready") < len(_chunk_counts(folder, "ready"))
    server = start(servers, folder)
    server.get("/login/")
    wait_for(lambda: _documents(folder, "fresh", "ready") == len(_chunk_counts(folder, "ready")),
             timeout=60, what="every document ingested", server=server)
    stop_in_time(server)  # idle, its work done
    assert server.process.returncode == 0 and FORCED not in server.log()
    assert _chunk_counts(folder, "fresh") == _chunk_counts(folder, "ready")
    assert _entry_count(folder, "fresh") == _entry_count(folder, "ready")


def test_it_stops_mid_embedding_upgrade_and_finishes_it_on_the_next_start(snapshots, tmp_path, servers):
    folder = copy_database(snapshots, "ready", tmp_path)
    with FakeOpenAIServer() as model:
        model.default = FakeReply(headers_delay_s=0.3)  # a slow model: each batch takes a while
        upgrade = {
            "EMBEDDER_UPGRADE": "openai:fake-embedder",
            "OPENAI_EMBEDDINGS_BASE_URL": model.base_url,
            "EMBEDDER_BATCH_SIZE": "8",
        }
        server = start(servers, folder, **upgrade)
        server.get("/login/")  # the first request resumes the upgrade of every KB
        wait_for(lambda: _entry_count(folder, "ready", "openai:fake-embedder") > 0,
                 timeout=30, what="a batch embedded by the upgrade", server=server)

        stop_in_time(server)

        assert FORCED not in server.log()
        assert _entry_count(folder, "ready", "openai:fake-embedder") < _chunk_total(folder, "ready")
        model.default = FakeReply()
        server = start(servers, folder, **upgrade)
        server.get("/login/")
        wait_for(lambda: _embedder(folder, "ready") == "openai:fake-embedder",
                 timeout=60, what="the upgrade finished", server=server)
        stop_in_time(server)
    assert _entry_count(folder, "ready", "openai:fake-embedder") == _chunk_total(folder, "ready")
    assert _entry_count(folder, "ready") == _chunk_total(folder, "ready")  # the old entries are gone


def test_it_stops_mid_graph_build_and_builds_the_same_graph_on_the_next_start(snapshots, tmp_path, servers):
    folder = copy_database(snapshots, "graph-pending", tmp_path)
    server = start(servers, folder, **HOLD)
    server.get("/login/")  # the first request resumes the build left queued
    wait_for(lambda: _graph_documents(folder, "ready") >= 1, timeout=30, what="a document in the graph", server=server)

    stop_in_time(server)

    assert FORCED not in server.log()
    assert _graph_documents(folder, "ready") < len(_chunk_counts(folder, "ready"))
    server = start(servers, folder)
    server.get("/login/")
    wait_for(lambda: _last_build(folder, "ready") == "done", timeout=60, what="the graph build done", server=server)
    stop_in_time(server)
    assert _graph(folder, "ready") == _graph(folder, "baseline")


def test_it_stops_mid_chat(snapshots, tmp_path, servers):
    folder = copy_database(snapshots, "ready", tmp_path)
    with FakeOpenAIServer() as model:
        model.default = FakeReply(text="Django works with Celery. " * 40, token_delay_s=0.1)
        server = start(servers, folder, LLM_PROVIDERS="openai", OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="k")
        server.get("/login/")
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        body = json.dumps({"message": "How does Django work with Celery?", "kb": "ready"})
        headers = {"Authorization": f"Bearer {_token(folder)}", "Content-Type": "application/json"}
        connection.request("POST", "/api/chat/stream", body, headers)
        response = connection.getresponse()
        assert response.status == 200
        streamed = b""
        while b"token" not in streamed:  # the answer is streaming from the model
            streamed += response.read1(4096)

        stop_in_time(server)
        connection.close()
    assert FORCED not in server.log()  # the streaming request ended with the server


def test_it_exits_by_force_when_a_request_thread_is_stuck(snapshots, tmp_path, servers):
    folder = copy_database(snapshots, "ready", tmp_path)
    server = start(servers, folder)
    server.get("/login/")
    with closing(sqlite3.connect(folder / "db.sqlite3", isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")  # every write now waits: the API's token update too
        statuses: list[int] = []
        request = threading.Thread(target=lambda: statuses.append(_post_chat(server, folder)), daemon=True)
        request.start()
        time.sleep(1.5)
        assert request.is_alive() and not statuses  # the request's thread is stuck

        seconds = stop_in_time(server)
        holder.execute("ROLLBACK")

    assert seconds > 1  # it did wait for the request a while
    assert FORCED in server.log()
    assert "agentic_rag/models.py" in server.log().split(FORCED, 1)[1]  # where it was stuck: the token's update
    assert query(folder, "PRAGMA integrity_check") == [("ok",)]


# --- reading the server's database ----------------------------------------------------------


def _token(folder: Path) -> str:
    return (folder / "token").read_text()


def _post_chat(server: Server, folder: Path) -> int:
    """The answer's status, or 0 when the server went away first."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    body = json.dumps({"message": "anything", "kb": "ready"})
    try:
        connection.request("POST", "/api/chat", body, {"Authorization": f"Bearer {_token(folder)}"})
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return 0


def _documents(folder: Path, kb: str, status: str) -> int:
    return query(folder, "SELECT COUNT(*) FROM knowledge_document d JOIN knowledge_knowledgebase k ON k.id = d.kb_id"
                         " WHERE k.slug = ? AND d.status = ?", kb, status)[0][0]


def _chunk_counts(folder: Path, kb: str) -> dict[str, int]:
    """Chunks per document name, of every version (a leftover would show as extra)."""
    rows = query(folder, "SELECT d.name, COUNT(c.id) FROM knowledge_document d JOIN knowledge_knowledgebase k"
                         " ON k.id = d.kb_id LEFT JOIN knowledge_chunk c ON c.document_id = d.id WHERE k.slug = ?"
                         " GROUP BY d.name", kb)
    return dict(rows)


def _chunk_total(folder: Path, kb: str) -> int:
    return sum(_chunk_counts(folder, kb).values())


def _entry_count(folder: Path, kb: str, embedder: str | None = None) -> int:
    sql = ("SELECT COUNT(*) FROM knowledge_searchentry e JOIN knowledge_knowledgebase k ON k.id = e.kb_id"
           " WHERE k.slug = ?")
    if embedder is None:
        return query(folder, sql, kb)[0][0]
    return query(folder, sql + " AND e.embedder = ?", kb, embedder)[0][0]


def _embedder(folder: Path, kb: str) -> str:
    return query(folder, "SELECT embedder FROM knowledge_knowledgebase WHERE slug = ?", kb)[0][0]


def _graph_documents(folder: Path, kb: str) -> int:
    return query(folder, "SELECT COUNT(*) FROM graphrag_graphdocument g JOIN knowledge_knowledgebase k"
                         " ON k.id = g.kb_id WHERE k.slug = ?", kb)[0][0]


def _last_build(folder: Path, kb: str) -> str:
    rows = query(folder, "SELECT b.status FROM graphrag_graphbuild b JOIN knowledge_knowledgebase k ON k.id = b.kb_id"
                         " WHERE k.slug = ? ORDER BY b.id DESC LIMIT 1", kb)
    return rows[0][0] if rows else ""


def _graph(folder: Path, kb: str) -> dict[str, object]:
    """What a graph holds, comparable between KBs: names, mention counts, relations, groups."""
    kb_id = query(folder, "SELECT id FROM knowledge_knowledgebase WHERE slug = ?", kb)[0][0]
    return {
        "entities": sorted(query(folder, "SELECT key, mention_count FROM graphrag_entity WHERE kb_id = ?", kb_id)),
        "mentions": query(folder, "SELECT COUNT(*), SUM(m.count) FROM graphrag_mention m JOIN graphrag_entity e"
                                  " ON e.id = m.entity_id WHERE e.kb_id = ?", kb_id),
        "relations": query(folder, "SELECT COUNT(*) FROM graphrag_relation WHERE kb_id = ?", kb_id),
        "communities": query(folder, "SELECT COUNT(*) FROM graphrag_community WHERE kb_id = ?", kb_id),
    }
