"""The executor of every asset job: Dagster's multiprocess executor on one machine, or
dagster-celery's executor, which sends each step to the Celery workers by its queue tag
while the run's own process claims the pools' slots from the instance (exact across runs
and workers on a Postgres instance)."""

from __future__ import annotations

import time

import dagster as dg

from kg_platform.orchestration.queues import submit_queue
from kg_platform.settings import Settings

EXECUTORS = ("multiprocess", "celery")
# how often a run asks the worker running one of its steps whether it is alive, and how
# many unanswered pings in a row mean it is gone
PING_EVERY_S = 10.0
PINGS_MISSED = 2


def executor_for(
    settings: Settings, multiprocess: dg.ExecutorDefinition = dg.multiprocess_executor
) -> dg.ExecutorDefinition:
    """`multiprocess` unless the settings name the Celery executor and its broker."""
    if settings.executor == "multiprocess":
        return multiprocess
    if settings.executor != "celery":
        raise ValueError(
            f"KG_EXECUTOR={settings.executor!r}: expected one of {', '.join(EXECUTORS)}"
        )
    if not settings.celery_broker:
        raise ValueError(
            "KG_EXECUTOR=celery: no broker; start one with `kg workers start` "
            "or set KG_CELERY_BROKER (and KG_CELERY_BACKEND) to the workers' Redis"
        )
    return watched_celery_executor().configured(
        {"broker": settings.celery_broker, "backend": settings.celery_backend},
        name="celery",
    )


class WorkerLost(RuntimeError):
    """The worker running a step stopped answering: the step fails, and re-executing the
    run from failure redoes it."""


class WatchedResult:
    """A step's Celery result that also becomes ready, as a failure, when the worker that
    started it no longer answers pings. dagster-celery alone waits for ever on a step whose
    worker was killed outright (its parent process and all): nobody reports the loss."""

    def __init__(self, result, app, step_key: str, instance=None, run_id: str = "") -> None:
        self._result = result
        self._app = app
        self._step_key = step_key
        self._instance = instance
        self._run_id = run_id
        self._checked = time.monotonic()
        self._missed = 0
        self._worker = ""

    def ready(self) -> bool:
        if self._result.ready():
            return True
        if time.monotonic() - self._checked < PING_EVERY_S:
            return False
        self._checked = time.monotonic()
        # STARTED (workers track it) carries the worker's name; a queued step has none
        if self._result.state != "STARTED" or not isinstance(self._result.info, dict):
            return False
        self._worker = self._result.info.get("hostname", "")
        if not self._worker:
            return False
        alive = self._app.control.ping(destination=[self._worker], timeout=1.0)
        self._missed = 0 if alive else self._missed + 1
        return self._missed >= PINGS_MISSED

    def get(self):
        if self._result.ready():
            return self._result.get()
        if self._instance is not None:
            # a step frees its pool slot with its own last event, which a killed worker never
            # writes: without this, each lost download would keep one `ncbi` slot for ever
            storage = self._instance.event_log_storage
            storage.free_concurrency_slot_for_step(self._run_id, self._step_key)
        raise WorkerLost(
            f"step {self._step_key}: celery worker {self._worker} stopped answering while "
            f"running it ({PINGS_MISSED} pings of {PING_EVERY_S:.0f} s unanswered); "
            "re-execute the run from failure"
        )

    def revoke(self) -> None:
        self._result.revoke()


def watched_celery_executor() -> dg.ExecutorDefinition:
    from dagster_celery.core_execution_loop import core_celery_execution_loop
    from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor, _submit_task

    def submit_watched(app, plan_context, step, queue, priority, known_state):
        queue = submit_queue(queue)  # the step's queue tag, routed as it is submitted
        result = _submit_task(app, plan_context, step, queue, priority, known_state)
        return WatchedResult(result, app, step.key, plan_context.instance, plan_context.run_id)

    class WatchedCeleryExecutor(CeleryExecutor):
        def execute(self, plan_context, execution_plan):
            return core_celery_execution_loop(
                plan_context, execution_plan, step_execution_fn=submit_watched
            )

    @dg.executor(
        name="celery",
        config_schema=CELERY_CONFIG,
        requirements=dg.multiple_process_executor_requirements(),
    )
    def celery(init_context):
        """dagster-celery's executor; a step whose worker dies fails instead of hanging."""
        from dagster._core.execution.retries import RetryMode

        config = init_context.executor_config
        return WatchedCeleryExecutor(
            broker=config.get("broker"),
            backend=config.get("backend"),
            config_source=config.get("config_source"),
            include=config.get("include"),
            retries=RetryMode.from_config(config["retries"]),
        )

    return celery
