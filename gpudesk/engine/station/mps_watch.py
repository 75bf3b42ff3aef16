"""The engine's watch over MPS: which GPUs' servers take new clients, a job's client settings, and
the periodic check that finds servers in FAULT, stops drained GPUs' daemons and notices recovery.

A GPU whose MPS server cannot be used is not lost: its new jobs are time-sliced instead, until
the server is healthy (or stopped, so the next client starts a fresh one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from gpudesk.core.wire.station import MpsFault
from gpudesk.engine.store.database import Store
from gpudesk.hw.mps import MpsError, MpsManager
from gpudesk.hw.telemetry.monitor import Monitor

log = logging.getLogger("gpudesk.engine")

MPS_CHECK_S = 10.0  # how often MPS servers are checked for FAULT and drained GPUs


class MpsWatch:
    def __init__(
        self,
        home_root: Path,
        store: Store,
        monitor: Callable[[], Monitor],
        on_change: Callable[[], None],
        shared: bool = False,
    ) -> None:
        """`monitor` gives the telemetry monitor in use (it is replaced when telemetry
        restarts); `on_change` asks for placement to look again."""
        self.manager = MpsManager(home_root, command_timeout=2.0, shared=shared)
        self.store = store
        self.monitor = monitor
        self.on_change = on_change
        self.faults: dict[str, str] = {}  # GPU UUID -> why its MPS server cannot be used
        self.checked_at = time.monotonic()

    @property
    def available(self) -> bool:
        return self.manager.available

    def gpu_uuid(self, index: int) -> str | None:
        return next((g.uuid for g in self.monitor().inventory if g.index == index), None)

    def usable(self, uuid: str | None) -> bool:
        if self.monitor().simulated:
            return True  # a simulated MPS server: placement and load, no daemon
        return bool(uuid) and self.manager.available and uuid not in self.faults

    def fault_list(self) -> list[MpsFault]:
        """The faults by GPU index (a UUID no longer listed last)."""
        index_of = {g.uuid: g.index for g in self.monitor().inventory}
        faults = [MpsFault(gpu=index_of.get(u), uuid=u, message=m) for u, m in self.faults.items()]
        return sorted(faults, key=lambda f: (f.gpu is None, f.gpu or 0, f.uuid))

    def client_env(
        self,
        gpu: int,
        thread_pct: int | None,
        memory_limit_mib: int | None,
        job_id: int,
    ) -> dict[str, str]:
        """Start (or reuse) the GPU's MPS control daemon and give the job its client settings.
        If MPS cannot run there the job is time-sliced instead, and the GPU takes no more MPS
        clients until its server is healthy again."""
        uuid = self.gpu_uuid(gpu) or ""
        try:
            self.manager.ensure(uuid)
            return self.manager.client_env(uuid, thread_pct, memory_limit_mib)
        except (MpsError, ValueError) as exc:
            self.faults[uuid] = str(exc)
            message = f"MPS is not usable on GPU {gpu} ({exc}); time-sliced instead"
            log.warning(message)
            self.store.add_event("mps", message, job_id=job_id)
            return {}

    def check(self, busy_gpus: Iterable[int]) -> None:
        """Every MPS_CHECK_S: a server in FAULT takes no new clients; a drained GPU's daemon
        is stopped (`busy_gpus`: those with MPS clients running); a GPU whose server recovered
        takes clients again."""
        now = time.monotonic()
        if now - self.checked_at < MPS_CHECK_S or not self.manager.available:
            return
        self.checked_at = now
        busy = {self.gpu_uuid(i) for i in busy_gpus}
        for uuid in self.manager.known_uuids():
            status = self.manager.status(uuid)
            if not status.usable and status.state == "fault":
                if uuid not in self.faults:
                    self.store.add_event(
                        "mps",
                        f"MPS server of {uuid} is in FAULT: "
                        f"{status.message}; new jobs there are time-sliced",
                    )
                self.faults[uuid] = status.message
            elif (status.usable or status.state == "stopped") and self.faults.pop(
                uuid, None
            ) is not None:
                # Healthy again, or stopped: the next MPS client starts a fresh daemon.
                self.store.add_event("mps", f"MPS on {uuid} is usable again ({status.state})")
                self.on_change()
        try:
            self.manager.stop_idle(u for u in busy if u)
        except MpsError as exc:
            log.warning("stopping idle MPS daemons: %s", exc)
