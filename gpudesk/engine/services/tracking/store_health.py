"""The MLflow stores as each owner's tracking worker finds them: reachable or not since when,
how many updates wait, how many were dropped (`StoreHealth`). A worker may report only on the
stores its owner's runs use (`StoreHealths.uses`); a store that starts or stops failing is
logged and kept as an event, at most a few times while it flaps. `status` lists them, a job
waiting for its run says why. Apart from `tracker` because it is its own state with its own
rules (who may report what, what others may read of a URI).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

import msgspec

from gpudesk.core.wire.station import TrackingHealth
from gpudesk.engine.services.tracking.replies import Complaints, EventBudget
from gpudesk.engine.services.tracking.sidecar import Sidecar, WorkerState
from gpudesk.engine.store.database import Store
from gpudesk.redact import redact_secrets
from gpudesk.text import safe_text
from gpudesk.tracking import messages

log = logging.getLogger("gpudesk.engine")

TRACKING_EVENT = "tracking"  # the kind of event tracking problems are stored as

# Whether the viewer of a request may see the secrets in the URIs of a user's (by uid) jobs:
# the owner and the admins may (requests.py decides); anyone else sees them redacted.
SeesSecrets = Callable[[int], bool]


class StoreHealth(msgspec.Struct):
    """A store as one owner's worker finds it."""

    uid: int
    uri: str
    queued: int = 0
    error: str | None = None
    since: float | None = None  # when it started failing (wall clock)
    dropped: int = 0
    events: EventBudget = msgspec.field(default_factory=EventBudget)  # its failing and recovering

    def view(self, user: str, unsent: int, worker: WorkerState, whole: bool) -> TrackingHealth:
        return TrackingHealth(
            user=user,
            uid=self.uid,
            mlflow_uri=self.uri if whole else redact_secrets(self.uri),
            queued=self.queued + unsent,
            error=self.error or worker.problem,
            error_since=self.since,
            dropped=self.dropped,
            starting=worker.starting,
        )


class StoreHealths:
    """Each (owner uid, store URI)'s health, and the stores each owner's runs use."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.health: dict[tuple[int, str], StoreHealth] = {}
        # The stores each owner's runs use: the ones her worker may report the health of.
        self.stores_of: dict[int, set[str]] = {}

    def uses(self, uid: int, uri: str) -> None:
        """A run of `uid` uses the store at `uri`: her worker may report on it."""
        self.stores_of.setdefault(uid, set()).add(uri)

    def error(self, uid: int, uri: str) -> str | None:
        """What the store at `uri` last failed with, as `uid`'s worker said (None: it answers,
        or nothing was said of it yet)."""
        health = self.health.get((uid, uri))
        return health.error if health else None

    def heard(self, uid: int, reply: messages.Health, complaints: Complaints) -> None:
        """A health reply of `uid`'s worker; one for a store none of her runs uses is not
        believed (it goes to `complaints`)."""
        if reply.uri not in self.stores_of.get(uid, ()):
            complaints.dropped("the health of a store none of its runs uses")
            return
        health = self.health.setdefault((uid, reply.uri), StoreHealth(uid, reply.uri))
        was_failing = health.error is not None
        health.queued, health.dropped = reply.queued, reply.dropped
        # Worker's text: what the store said, which may name the store with its password.
        error = None if reply.error is None else redact_secrets(safe_text(reply.error))
        health.error = error
        shown_uri = redact_secrets(reply.uri)  # the log and the events are read by others
        if error is not None and not was_failing:
            health.since = time.time()
            message = (
                f"MLflow store {shown_uri} unreachable: {error}; {reply.queued} "
                "update(s) queued, retrying"
            )
        elif error is None and was_failing:
            health.since = None
            message = f"MLflow store {shown_uri} answers again; the queued updates are sent"
        else:
            return
        if not health.events.take():  # a store flapping (or said to): its first changes said
            return
        log.log(logging.WARNING if error else logging.INFO, "%s", message)
        self.store.add_event(TRACKING_EVENT, message)

    def listing(
        self,
        in_use: Iterable[tuple[int, str]],
        workers: Mapping[int, Sidecar],
        sees_secrets: SeesSecrets,
        name: Callable[[int], str],
    ) -> list[TrackingHealth]:
        """Each store each owner's worker talks to, or is to talk to (`in_use`: the runs'
        owners and stores): what `status` shows. A store its worker has said nothing of yet (it
        is starting, or cannot start) is shown too, with the worker's problem. A store's URI is
        its owner's: whole only for a viewer who `sees_secrets` of that owner's jobs. `name`: an
        owner's, as `status` names its users (not asking the user database on the loop)."""
        stores = dict(self.health)
        for uid, uri in in_use:
            stores.setdefault((uid, uri), StoreHealth(uid, uri))
        shown = []
        for (uid, _uri), health in sorted(stores.items()):
            worker = workers.get(uid)
            unsent = len(worker.outbox) if worker else 0
            state = worker.state if worker else WorkerState(uid)  # none yet: nothing to say
            shown.append(health.view(name(uid), unsent, state, sees_secrets(uid)))
        return shown
