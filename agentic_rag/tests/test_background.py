from __future__ import annotations

import threading

from agentic_rag import background
from chat.tasks import summarise_conversation
from knowledge.tasks import ingest_document, upgrade_embeddings


def test_each_celery_queue_gets_its_own_background_thread():
    ingestion = background._executor_for(ingest_document)
    embedding = background._executor_for(upgrade_embeddings)
    default = background._executor_for(summarise_conversation)

    assert len({id(ingestion), id(embedding), id(default)}) == 3
    assert background._executor_for(ingest_document) is ingestion


def test_a_long_embedding_task_does_not_hold_up_ingestion():
    release = threading.Event()
    blocked = background._executor_for(upgrade_embeddings).submit(release.wait, 5)
    try:
        ran = background._executor_for(ingest_document).submit(lambda: "ingested")
        assert ran.result(timeout=2) == "ingested"
    finally:
        release.set()
    assert blocked.result(timeout=5) is True


def test_with_the_broker_down_a_task_runs_in_this_process(settings, monkeypatch, caplog):
    from kombu.exceptions import OperationalError

    settings.BACKGROUND_TASKS = "celery"
    ran = threading.Event()

    def broker_down(*args):
        raise OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr(summarise_conversation, "delay", broker_down)
    monkeypatch.setattr(background, "_apply_in_background", lambda task, args: ran.set())

    background.dispatch(summarise_conversation, 1)

    assert ran.wait(5)
    assert "running it in this process" in caplog.text
