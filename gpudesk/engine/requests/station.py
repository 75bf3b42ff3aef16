"""The engine and its station: `ping`, `status`, `shutdown`, `configure` and `check_configure`
(a [station] table weighed key by key), and `datasets` (shared-loader registrations)."""

from __future__ import annotations

import logging
import os
from functools import partial

import msgspec

from gpudesk import __version__, diskspace
from gpudesk.core import protocol, reconfigure
from gpudesk.core.datasets import DatasetSpec
from gpudesk.core.identity import Caller
from gpudesk.core.protocol import ProtocolError
from gpudesk.core.station import STATION_EVENT
from gpudesk.core.wire.requests import ConfigureArgs, DatasetsArgs, OpArgs, StatusArgs
from gpudesk.core.wire.station import (
    ConfigureResult,
    DatasetsResult,
    GpuCounts,
    LoaderSpec,
    MpsInfo,
    PingResult,
    ShutdownResult,
    SlotCounts,
    StationInfo,
    StationStatus,
    UserShare,
)
from gpudesk.engine.offloop import Later
from gpudesk.engine.requests.common import Handler, Requests, named
from gpudesk.engine.services.loaders import Statuses
from gpudesk.policy.policies import make_policy

STATION_CHANGES_SHOWN = 5  # how many of the latest `status` carries
# Station settings that need a fresh telemetry monitor when they change.
TELEMETRY_KEYS = ("backend", "sample_interval", "grid_intensity", "mig")

log = logging.getLogger("gpudesk.engine")


class StationRequests(Requests):
    """The station-wide ops."""

    def ops(self) -> dict[str, Handler]:
        return {
            "ping": self.ping,
            "status": self.status,
            "shutdown": self.shutdown,
            "configure": named(self.configure),
            "check_configure": self.check_configure,
            "datasets": self.datasets,
        }

    def ping(self, _args: OpArgs, _caller: Caller) -> PingResult:
        home, wire = str(self.parts.home.root), protocol.PROTOCOL_VERSION
        return PingResult(pid=os.getpid(), version=__version__, protocol=wire, home=home)

    def status(self, args: StatusArgs, caller: Caller) -> StationStatus | Later[Statuses]:
        """The engine, the station and its loaders; `fresh_loaders`: the producers asked now,
        off the loop (one that does not answer is waited for up to a second), the reply built
        once they have answered."""
        loaders = self.parts.loaders
        if args.fresh_loaders and loaders.producers:

            def finish(statuses: Statuses) -> StationStatus:
                loaders.apply_status(statuses)
                return self._status(caller)

            return Later(
                loaders.ask_status(),
                finish,
                loaders.status_bound_s(),
                "asking the shared loaders for their status",
            )
        return self._status(caller)

    def _status(self, caller: Caller) -> StationStatus:
        parts = self.parts
        view = parts.scheduler.station_view()
        monitor = parts.telemetry.monitor
        config = parts.station.config
        mps = MpsInfo(available=parts.mps.available, faults=parts.mps.fault_list())
        return StationStatus(
            pid=os.getpid(),
            version=__version__,
            protocol=protocol.PROTOCOL_VERSION,
            home=str(parts.home.root),
            started_at=parts.started_at,
            station=StationInfo(
                **config.view(),
                effective_backend=monitor.backend.name,
                simulated=monitor.simulated,
                gpu_problem=view.gpu_problem,
                effective_slots=config.effective_slots,
                cores=parts.cores,
                gpus=view.gpu_count,
                mps=mps,
                metrics_url=parts.metrics.url,
                metrics_problem=parts.metrics.problem,
                admins=parts.access.admins,
            ),
            slots=SlotCounts(total=len(view.slots), busy=len(view.busy_slots)),
            gpus=GpuCounts(
                total=view.gpu_count, busy=len(view.busy_gpus), lost=len(view.lost_gpus)
            ),
            counts=self._counts(),
            loaders=parts.loaders.summary(partial(self._sees_secrets, caller)),  # `sees_why`
            users=self._user_shares(),
            station_changes=[
                event.view()
                for event in parts.store.events_of_kind(STATION_EVENT, STATION_CHANGES_SHOWN)
            ],
            tracking=parts.tracking.health_list(partial(self._sees_secrets, caller), self._name),
            loop=parts.loop.summary(),
            drain=parts.scheduler.drain.state,
            store_problem=diskspace.store_text(parts.home.root, len(parts.attempts.unsaved())),
        )

    def _counts(self) -> dict[str, int]:
        """Jobs by state: as stored, but a job whose end is worked out and not yet saved (a
        full disk) counted as it ended, as the listings show it."""
        counts = self.parts.store.counts()
        for live in self.parts.attempts.unsaved().values():
            end = live.unsaved
            if end is not None and counts.get("running", 0) > 0:
                counts["running"] -= 1
                counts[end.state.value] = counts.get(end.state.value, 0) + 1
        return counts

    def _user_shares(self) -> list[UserShare]:
        """Each user with recent usage, running GPUs or waiting jobs: what fair share weighs."""
        parts = self.parts
        usage = parts.scheduler.usage_by_user()
        running = parts.scheduler.running_gpus_by_user()
        waiting: dict[int, int] = {}
        for job in parts.queue.ordered():
            waiting[job.owner.uid] = waiting.get(job.owner.uid, 0) + 1
        uids = sorted(set(usage) | set(running) | set(waiting), key=lambda u: usage.get(u, 0.0))
        return [
            UserShare(
                user=self._name(uid),
                uid=uid,
                usage_gpu_h=round(usage.get(uid, 0.0), 6),
                running_gpus=running.get(uid, 0),
                waiting=waiting.get(uid, 0),
            )
            for uid in uids
        ]

    def _name(self, uid: int) -> str:
        """A user's name as stored with her newest job: every desk asks `status` twice a second,
        and a user database (LDAP, SSSD) may take seconds a name, so it is never asked here: the
        uid's digits where none of her jobs has one (each stored before schema 21)."""
        return self.parts.store.owner_login(uid) or str(uid)

    def shutdown(self, _args: OpArgs, caller: Caller) -> ShutdownResult:
        self._need_admin(caller, "stop the engine")
        self.parts.stop()
        return ShutdownResult(running_attempts=len(self.parts.attempts))

    def configure(self, args: ConfigureArgs, caller: Caller) -> ConfigureResult:
        """{"station": a [station] table}: weigh it key by key (core/reconfigure.py). Only
        the keys it names count; an admin's differing keys are applied, each recorded as an
        event; anyone else's are reported as not applied (never an error: a profile's run goes
        on with the station as it is). Returns the config in force, `changed`, and the
        `changes` and `not_applied`, each with its message."""
        parts = self.parts
        old = parts.station.config
        weighed = self._weigh(args, caller)
        try:
            policy = make_policy(weighed.config.policy)
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None
        for item in weighed.not_applied:
            log.info("station setting from %s %s", caller.name, item.message)
        config = weighed.config
        changes = list(weighed.changes)
        if changes:
            for change in changes:
                message = f"station: {change.message} (by {caller.name})"
                log.info("%s", message)
                parts.store.add_event(STATION_EVENT, message)
            telemetry_changed = any(getattr(config, k) != getattr(old, k) for k in TELEMETRY_KEYS)
            parts.station.replace(config)
            parts.scheduler.policy = policy
            if telemetry_changed:
                parts.telemetry.restart()
            if config.metrics_listen != old.metrics_listen:
                changes = [
                    self._metrics_moved(c) if c.key == "metrics_listen" else c for c in changes
                ]
            parts.due.mark()
        return reconfigure.settings_reply(
            config, changes, weighed.not_applied, changed=bool(changes)
        )

    def _settings_refusal(self, caller: Caller) -> str | None:
        """Why `caller` may change no station setting; None for an admin."""
        access = self.parts.access
        if access.is_admin(caller):
            return None
        return f"only {access.admin_role} changes station settings"

    def _weigh(self, args: ConfigureArgs, caller: Caller) -> reconfigure.Reconfiguration:
        """The [station] table of `args` weighed against the config in force, for `caller`:
        what `configure` applies, and what `check_configure` says it would."""
        parts = self.parts
        queued_gpu_jobs = sum(1 for job in parts.queue.ordered() if job.spec.gpus)
        try:
            return reconfigure.weigh(
                parts.station.config,
                args.station,
                refusal=self._settings_refusal(caller),
                queued_gpu_jobs=queued_gpu_jobs,
                running_by_gpu=parts.attempts.running_by_gpu(),
            )
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, str(exc)) from None

    def check_configure(self, args: ConfigureArgs, caller: Caller) -> ConfigureResult:
        """`configure`'s weighing without applying anything: what the [station] table would
        change and what would not be applied (a profile run that leaves the station as it is
        says what differs). An op of its own, not a flag on `configure`, so that an engine
        from before it answers `unknown_op` instead of applying the table."""
        weighed = self._weigh(args, caller)
        config = self.parts.station.config
        return reconfigure.settings_reply(
            config, weighed.changes, weighed.not_applied, changed=False
        )

    def _metrics_moved(self, change: reconfigure.SettingChange) -> reconfigure.SettingChange:
        """Start, move or stop the metrics endpoint; the change says what came of it (a port in
        use is said here, in engine.log and as an engine event, and the engine goes on)."""
        metrics = self.parts.metrics
        problem = metrics.apply()
        if problem is not None:
            note = problem.removeprefix("metrics: ")
        elif metrics.url is not None:
            note = f"serving {metrics.url}"
        else:
            note = "metrics no longer served"
        return msgspec.structs.replace(change, note=note)

    def datasets(self, args: DatasetsArgs, caller: Caller) -> DatasetsResult:
        """Register datasets' shared-loader settings (a profile's [datasets] tables); an empty
        list only lists the registered ones. Registering a new dataset or new settings is an
        admin's: the engine's producer imports the factory module and reads the data as the
        engine's user (root, on a system engine). Anyone may repeat what is registered."""
        loaders = self.parts.loaders
        try:
            specs = [DatasetSpec.from_dict(d) for d in args.datasets]
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, f"datasets: {exc}") from None
        new = [spec.name for spec in specs if loaders.specs.get(spec.name) != spec]
        if new:
            self._need_admin(
                caller, f"register shared-loader datasets or change their settings ({new[0]})"
            )
        try:
            loaders.register(specs)
        except ValueError as exc:
            raise ProtocolError(protocol.INVALID_ARGS, f"datasets: {exc}") from None
        self.parts.store.set_setting("datasets", [s.to_dict() for s in loaders.specs.values()])
        return DatasetsResult(
            datasets=sorted(loaders.specs),
            specs=[LoaderSpec(**s.to_dict()) for _, s in sorted(loaders.specs.items())],
        )
