"""The Celery app; configuration comes from Django settings (CELERY_*).

On a warm shutdown (SIGTERM) the running tasks stop at their next batch boundary and go
back to the broker (agentic_rag.background.postpone), so the worker exits within its stop
timeout and the work resumes on whichever worker takes it next. A worker killed outright
leaves its task with the broker until the visibility timeout: every worker's main process
sweeps for such dead runs instead (knowledge.liveness) and queues them again.
"""

from __future__ import annotations

import os
import signal

from celery import Celery
from celery.signals import worker_process_init, worker_ready, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentic_rag.settings")

app = Celery("agentic_rag")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# How the main process tells its prefork pool processes to stop: SIGTERM would kill them
# outright (Celery resets it to the default there) and billiard uses SIGUSR1 itself.
STOP_SIGNAL = signal.SIGUSR2


@worker_shutting_down.connect
def stop_tasks_at_batch_boundary(sig: str, how: str, exitcode: int, **kwargs) -> None:
    """Ask the tasks of this worker to stop at their next batch boundary."""
    from billiard.process import active_children

    from agentic_rag.shutdown import request_stop

    request_stop(f"Celery worker: {how} shutdown on {sig}")  # the solo and threads pools
    for child in active_children():  # the prefork pool
        try:
            os.kill(child.pid, STOP_SIGNAL)
        except ProcessLookupError:
            pass  # it ended meanwhile


@worker_process_init.connect
def listen_for_stop(**kwargs) -> None:
    """Let the main process ask this pool process's task to stop (see STOP_SIGNAL)."""
    from agentic_rag.shutdown import request_stop

    signal.signal(STOP_SIGNAL, lambda signum, frame: request_stop("Celery worker: shutdown"))


@worker_ready.connect
def sweep_for_dead_runs(**kwargs) -> None:
    """Take over, every INGESTION_SWEEP_S, the ingestions of workers that were killed."""
    from django.conf import settings

    from agentic_rag.background import start_sweeper
    from knowledge.tasks import sweep_stalled_ingestions

    if settings.BACKGROUND_TASKS == "celery":  # a worker of another mode would queue to itself
        start_sweeper(sweep_stalled_ingestions, settings.INGESTION_SWEEP_S)
