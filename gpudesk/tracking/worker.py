"""The tracking worker: `python -m gpudesk.tracking.worker`, one per job owner, started
by the engine (`sidecar`) as that owner. It reads ops (`messages`) on stdin, one JSON line each,
and talks to the MLflow stores they name; it answers on stdout.

Nothing here may hold the engine up, so the work is done in this process, in its own time:
- a reader thread takes every line as it comes (the engine's pipe never fills behind a slow
  call), the main thread works through each store's ops in order;
- metric points wait up to FLUSH_S and go in batches (`log_batch`, at most MAX_BATCH_METRICS
  a call): a 1 s sample interval is not one request per metric;
- a store that fails is retried, backing off from RETRY_FIRST_S to RETRY_MAX_S, its ops kept in
  order (at most MAX_QUEUED_POINTS metric points: past that the oldest go, counted); the
  engine hears of it (`Health`) when it starts failing, at each retry, and when it answers again;
- what the store refuses (a changed param, a deleted run) is not retried: `Rejected`;
- a run is made once per key: the worker asks the store for a run tagged with the key before
  making one, so an engine or worker restarted between making it and hearing of it finds it;
- the end of its input is the engine gone, stopped or killed: the engine alone holds the pipe's
  other end (close-on-exec in every other process it starts), so the reader sees it at once,
  a SIGKILL too (no PR_SET_PDEATHSIG needed, which a worker run as another uid would lose). The
  worker then finishes what it holds for at most messages.EXIT_GRACE_S and exits, a store call
  still in flight or not (`_reader`): what did not go is the next engine's to send again.

mlflow is imported on first use, here only: never in the engine.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gpudesk.redact import redact_secrets
from gpudesk.tracking import messages
from gpudesk.tracking.messages import (
    EXIT_GRACE_S,
    Acked,
    BindRun,
    CreateRun,
    Health,
    LogToRun,
    Rejected,
    RunMade,
    SetStatus,
)

log = logging.getLogger("gpudesk.tracking")

FLUSH_S = 1.0  # how long metric points wait to share a batch
MAX_BATCH_METRICS = 1000  # MLflow's log_batch limits
MAX_BATCH_PARAMS = 100
MAX_BATCH_TAGS = 100
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
MAX_QUEUED_POINTS = 200_000  # per store: ~20 MB; past it the oldest points go
KEY_TAG = "gpudesk.key"  # the tag that names a run's gpudesk key (how a run is found again)
# Codes with which a store refuses a request for good: trying again cannot help.
REFUSED_CODES = frozenset(
    {
        "INVALID_PARAMETER_VALUE",
        "RESOURCE_DOES_NOT_EXIST",
        "INVALID_STATE",
        "RESOURCE_ALREADY_EXISTS",
        "BAD_REQUEST",
    }
)


class Refused(Exception):
    """The store said no to an op for good."""


@dataclass
class StoreQueue:
    """One store's ops in order, and how it fares."""

    uri: str
    ops: deque[tuple[float, messages.Op]] = field(default_factory=deque)  # (arrived, op)
    points: int = 0
    error: str | None = None
    delay: float = RETRY_FIRST_S
    retry_at: float = 0.0
    dropped: int = 0
    told: tuple[int, str | None, int] | None = None  # the last Health sent

    def due(self, now: float, closing: bool) -> bool:
        if not self.ops or now < self.retry_at:
            return False
        if closing or self.points >= MAX_BATCH_METRICS:
            return True
        return any(not isinstance(op, LogToRun) for _, op in self.ops) or (
            now - self.ops[0][0] >= FLUSH_S
        )


def _error_text(exc: BaseException) -> str:
    """An error as the engine hears of it: one line, cut, with no store's password in it (an
    HTTP store's errors name its URL, userinfo and all)."""
    text = redact_secrets(" ".join(str(exc).split()))
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _refused(exc: BaseException) -> bool:
    return getattr(exc, "error_code", None) in REFUSED_CODES


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Worker:
    def __init__(self, emit: Any) -> None:
        self.emit = emit  # writes one reply
        self.stores: dict[str, StoreQueue] = {}
        self.runs: dict[tuple[str, str], str] = {}  # (uri, key) -> run id
        self.refused: set[tuple[str, str]] = set()  # keys whose run could not be made
        self.clients: dict[str, Any] = {}
        self.experiments: dict[tuple[str, str], str] = {}

    # ------------------------------------------------------------------ ops in
    def take(self, op: messages.Op) -> None:
        if isinstance(op, BindRun):
            self.runs[(op.uri, op.key)] = op.run_id
            return
        store = self.stores.setdefault(op.uri, StoreQueue(op.uri))
        store.ops.append((time.monotonic(), op))
        if isinstance(op, LogToRun):
            store.points += len(op.metrics)
            while store.points > MAX_QUEUED_POINTS:
                self._drop_oldest_points(store)

    @staticmethod
    def _drop_oldest_points(store: StoreQueue) -> None:
        for index, (arrived, op) in enumerate(store.ops):
            if isinstance(op, LogToRun) and op.metrics:
                store.points -= len(op.metrics)
                store.dropped += len(op.metrics)
                store.ops[index] = (arrived, msgspec.structs.replace(op, metrics=()))
                return
        store.points = 0

    # ------------------------------------------------------------------- work
    def work_due(self, closing: bool = False) -> None:
        now = time.monotonic()
        for store in list(self.stores.values()):
            if closing and store.error is not None:
                # The engine stopped and this store fails: what waits for it is dropped now,
                # never sent later. The next engine sends the runs' lives again, and its worker
                # alone may make them (two workers racing to make one run would make two).
                store.ops.clear()
                store.points = 0
                continue
            if store.due(now, closing):
                self.work(store)

    def next_due(self) -> float | None:
        """Seconds until some store is due (None: nothing waits)."""
        now = time.monotonic()
        waits = []
        for store in self.stores.values():
            if store.ops:
                start = max(store.retry_at, store.ops[0][0] + FLUSH_S)
                waits.append(max(0.0, start - now))
        return min(waits) if waits else None

    @property
    def pending(self) -> bool:
        return any(store.ops for store in self.stores.values())

    def work(self, store: StoreQueue) -> None:
        while store.ops:
            if isinstance(store.ops[0][1], LogToRun):
                self._merge_logs(store)
            arrived, op = store.ops[0]
            try:
                rest = self.apply(op)
            except Exception as exc:
                if isinstance(exc, Refused) or _refused(exc):
                    store.ops.popleft()
                    self._forget(store, op)
                    self._refuse(op, str(exc) if isinstance(exc, Refused) else _error_text(exc))
                    continue
                store.error = _error_text(exc)
                store.retry_at = time.monotonic() + store.delay
                log.warning(
                    "store %s failed (again in %.1f s): %s",
                    redact_secrets(store.uri),
                    store.delay,
                    redact_secrets(str(exc)),
                )
                store.delay = min(RETRY_MAX_S, store.delay * 2)
                self._tell(store)
                return
            if rest is None:
                store.ops.popleft()
                self._forget(store, op)
            else:  # a batch went, the rest of its op waits for the next call
                store.points -= len(op.metrics) - len(rest.metrics)  # type: ignore[union-attr]
                store.ops[0] = (arrived, rest)
        store.error = None
        store.delay = RETRY_FIRST_S
        store.retry_at = 0.0
        self._tell(store)

    def _refuse(self, op: messages.Op, why: str) -> None:
        """Say an op was refused, once per run: a run that could not be made refuses every
        later op, and the engine needs to hear it once."""
        if (op.uri, op.key) in self.refused:
            return
        if isinstance(op, CreateRun):
            self.refused.add((op.uri, op.key))
        log.warning(
            "the store %s refused %s for %s: %s", redact_secrets(op.uri), op.op, op.key, why
        )
        self.emit(Rejected(op.key, why))

    def _forget(self, store: StoreQueue, op: messages.Op) -> None:
        if isinstance(op, LogToRun):
            store.points -= len(op.metrics)

    def _merge_logs(self, store: StoreQueue) -> None:
        """The log ops at the head, up to the first other op, merged per run (their order
        within a run kept): one batch per run instead of one call per sample."""
        head: list[tuple[float, LogToRun]] = []
        while store.ops and isinstance(store.ops[0][1], LogToRun):
            arrived, op = store.ops.popleft()
            assert isinstance(op, LogToRun)
            head.append((arrived, op))
        merged: dict[str, tuple[float, LogToRun]] = {}
        for arrived, op in head:
            if op.key in merged:
                first, kept = merged[op.key]
                merged[op.key] = (
                    first,
                    msgspec.structs.replace(
                        kept,
                        metrics=kept.metrics + op.metrics,
                        params={**kept.params, **op.params},
                        tags={**kept.tags, **op.tags},
                    ),
                )
            else:
                merged[op.key] = (arrived, op)
        store.ops.extendleft(reversed(list(merged.values())))

    def _tell(self, store: StoreQueue) -> None:
        queued = len(store.ops)
        said = (queued, store.error, store.dropped)
        if said != store.told:
            store.told = said
            self.emit(Health(store.uri, queued, store.error, store.dropped))

    # ------------------------------------------------------------ MLflow calls
    def client(self, uri: str) -> Any:
        client = self.clients.get(uri)
        if client is None:
            from mlflow.tracking import MlflowClient

            client = self.clients[uri] = MlflowClient(tracking_uri=uri)
        return client

    def run_id(self, uri: str, key: str) -> str:
        run_id = self.runs.get((uri, key))
        if run_id is None:
            raise Refused(f"its MLflow run could not be made, so {key} has nowhere to go")
        return run_id

    def apply(self, op: messages.Op) -> LogToRun | None:
        """Do one op; for a log op too big for one call, the part left to do (None: done)."""
        if isinstance(op, CreateRun):
            self.create(op)
        elif isinstance(op, LogToRun):
            return self.log(op)
        elif isinstance(op, SetStatus):
            run_id = self.run_id(op.uri, op.key)
            client = self.client(op.uri)
            if op.end_ms is not None:
                client.set_terminated(run_id, op.status, end_time=op.end_ms)
            else:
                client.update_run(run_id, status=op.status)
            if op.ack:
                self.emit(Acked(op.key))
        return None

    def experiment_id(self, uri: str, name: str) -> str:
        known = self.experiments.get((uri, name))
        if known is not None:
            return known
        client = self.client(uri)
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            try:
                experiment_id = client.create_experiment(name, artifact_location=_artifacts(uri))
            except Exception as exc:  # made meanwhile by another worker: use it
                experiment = client.get_experiment_by_name(name)
                if experiment is None:
                    raise exc from None
                experiment_id = experiment.experiment_id
        elif experiment.lifecycle_stage == "deleted":
            raise Refused(
                f"the MLflow experiment {name!r} is deleted; restore it (mlflow experiments "
                "restore) or name another experiment"
            )
        else:
            experiment_id = experiment.experiment_id
        self.experiments[(uri, name)] = experiment_id
        return experiment_id

    def create(self, op: CreateRun) -> None:
        if (op.uri, op.key) in self.runs:
            self.emit(RunMade(op.key, self.runs[(op.uri, op.key)]))
            return
        client = self.client(op.uri)
        experiment_id = self.experiment_id(op.uri, op.experiment)
        tags = {**op.tags, KEY_TAG: op.key}
        if op.parent is not None:
            tags["mlflow.parentRunId"] = self.run_id(op.uri, op.parent)
        found = client.search_runs(
            [experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{op.key}'", max_results=1
        )
        if found:
            run_id = found[0].info.run_id
        else:
            run = client.create_run(
                experiment_id, start_time=op.start_ms, tags=tags, run_name=op.run_name
            )
            run_id = run.info.run_id
            if op.status != "RUNNING":  # create_run makes it RUNNING
                client.update_run(run_id, status=op.status)
        self.runs[(op.uri, op.key)] = run_id
        if op.params:
            from mlflow.entities import Param

            params = [Param(k, v) for k, v in op.params.items()]
            for chunk in _chunks(params, MAX_BATCH_PARAMS):
                try:
                    client.log_batch(run_id, params=chunk)
                except Exception as exc:
                    if not _refused(exc):
                        raise
                    self.emit(Rejected(op.key, f"params: {_error_text(exc)}"))
        self.emit(RunMade(op.key, run_id))

    def log(self, op: LogToRun) -> LogToRun | None:
        from mlflow.entities import Metric, Param, RunTag

        run_id = self.run_id(op.uri, op.key)
        client = self.client(op.uri)
        if op.params or op.tags:
            for chunk in _chunks([Param(k, v) for k, v in op.params.items()], MAX_BATCH_PARAMS):
                client.log_batch(run_id, params=chunk)
            for tags in _chunks([RunTag(k, v) for k, v in op.tags.items()], MAX_BATCH_TAGS):
                client.log_batch(run_id, tags=tags)
            op = msgspec.structs.replace(op, params={}, tags={})
        while op.metrics:
            batch = op.metrics[:MAX_BATCH_METRICS]
            client.log_batch(
                run_id,
                metrics=[Metric(m.name, m.value, m.timestamp_ms, m.step) for m in batch],
            )
            op = msgspec.structs.replace(op, metrics=op.metrics[MAX_BATCH_METRICS:])
            if op.metrics:
                return op
        return None


def _artifacts(uri: str) -> str | None:
    """Where a new experiment of an SQLite store keeps artifacts: beside the database (MLflow's
    default is ./mlruns of the process, and the worker runs in /)."""
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///") :]
        return os.path.join(os.path.dirname(path) or "/", "mlartifacts")
    return None


# ----------------------------------------------------------------------- process
def _reader(inbox: queue.SimpleQueue[bytes | None], worker: Worker) -> None:
    """Every line in, as it comes; at the end of input (the engine stopped or died) the bound
    on what is left: the main thread drains for EXIT_GRACE_S, and where it is still in a store
    call then (an HTTP store's 10 s timeout, a locked SQLite file, MLflow's import and the
    store's first open, seconds each) the process ends here, whatever that call was doing. The
    grace was once checked only between calls: 5 s, plus the call in flight, up to 15 s."""
    for line in sys.stdin.buffer:
        inbox.put(line)
    inbox.put(None)
    time.sleep(EXIT_GRACE_S)
    log.warning(
        "the engine stopped %.0f s ago; %d update(s) its stores did not take are left: the "
        "next engine sends the runs and their ends again (metric samples are not kept)",
        EXIT_GRACE_S,
        sum(len(store.ops) for store in list(worker.stores.values())),
    )
    logging.shutdown()
    os._exit(0)


def main() -> int:
    # MLflow imports pandas, where installed, only to offer its pandas dataset type
    # (mlflow.data.dataset_registry passes over an ImportError); this process logs params,
    # metrics and tags alone, and pandas would be ~0.35 s of the ~1.7 s of CPU its start
    # costs (docs/benchmarks.md). A None in sys.modules makes `import pandas` fail: in this
    # process only, and only where nothing imported pandas before.
    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    lock = threading.Lock()
    out = sys.stdout.buffer

    def emit(reply: messages.Reply) -> None:
        with lock:
            try:
                out.write(messages.encode(reply))
                out.flush()
            except OSError:  # EPIPE: the engine is gone. What it held goes on to the stores,
                os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())  # what it says nowhere

    inbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    worker = Worker(emit)
    threading.Thread(target=_reader, args=(inbox, worker), daemon=True, name="stdin").start()
    closing_at: float | None = None
    while True:
        wait = worker.next_due()
        if closing_at is not None:
            wait = 0.05
        try:
            line = inbox.get(timeout=wait if wait is not None else 1.0)
            while True:
                if line is None:
                    closing_at = closing_at or time.monotonic() + EXIT_GRACE_S
                elif line.strip():
                    try:
                        worker.take(messages.decode_op(line))
                    except messages.BadMessage as exc:
                        log.error("an unreadable op from the engine, ignored: %s", exc)
                line = inbox.get_nowait()
        except queue.Empty:
            pass
        worker.work_due(closing=closing_at is not None)
        if closing_at is not None and (not worker.pending or time.monotonic() >= closing_at):
            if worker.pending:
                log.warning("the engine stopped; updates its stores did not take are left")
            return 0


if __name__ == "__main__":
    sys.exit(main())
