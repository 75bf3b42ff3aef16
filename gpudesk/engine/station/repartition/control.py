"""The engine's MIG control: the plan of each MIG GPU for the queue, applying a layout to an
idle GPU where the station allows it (a simulated station's `mig` table, or nvidia-smi), and
`auto`'s own repartitioning where the interference model says it pays.

It never enables MIG mode, resets a GPU or touches the queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

import msgspec

from gpudesk.core.mig_layout import MigError, MigUsageError
from gpudesk.core.mig_records import MigSlot
from gpudesk.core.station import StationConfig
from gpudesk.core.wire.mig import MigApplyResult, MigDeviceCreated, QueueTimeView
from gpudesk.engine.state import CurrentStation
from gpudesk.engine.station.repartition.station import (
    SETTLE_S,
    MigApplyRefused,
    apply_on_gpu,
    check_change,
    read_gpus,
    station_plans,
)
from gpudesk.engine.station.telemetry_sink import TelemetrySink
from gpudesk.engine.store.database import Store
from gpudesk.policy.interference import ModelParams
from gpudesk.policy.mig_planner import GpuMigState, MigPlan, QueuedDemand

log = logging.getLogger("gpudesk.engine")


# A plan, what auto's repartitioning says of it, and the queue's drain time with it.
PlanAndPredictions = tuple[MigPlan, str | None, QueueTimeView | None]


class MigNotConfirmed(MigApplyRefused):
    """Applying would destroy instances and the request did not confirm it."""


class MigApplied(msgspec.Struct, frozen=True):
    """What a `mig_apply` request did (or would have done, when the layout is already there)."""

    gpu: int
    previous: tuple[str, ...]
    profiles: tuple[str, ...]
    commands: tuple[str, ...]
    simulated: bool
    applied: bool
    message: str
    mig_devices: tuple[MigSlot, ...] = ()  # a real GPU's, after apply

    def view(self) -> MigApplyResult:
        return MigApplyResult(
            gpu=self.gpu,
            previous=list(self.previous),
            profiles=list(self.profiles),
            commands=list(self.commands),
            mig_devices=[MigDeviceCreated(**device.to_dict()) for device in self.mig_devices],
            simulated=self.simulated,
            applied=self.applied,
            message=self.message,
        )


class MigControl:
    def __init__(
        self,
        station: CurrentStation,
        store: Store,
        telemetry: TelemetrySink,
        queued: Callable[[], list[QueuedDemand]],
        running_by_gpu: Callable[[], Mapping[int, tuple[int, ...]]],
        on_change: Callable[[], None],
        params_for: Callable[[str], ModelParams],
    ) -> None:
        """`queued`: the queued jobs a MIG slice could take, in placement order;
        `running_by_gpu`: GPU index -> the jobs running on it; `on_change` asks for placement
        to look again; `params_for`: the interference model's parameters for a GPU model."""
        self.station = station
        self.store = store
        self.telemetry = telemetry
        self.queued = queued
        self.running_by_gpu = running_by_gpu
        self.on_change = on_change
        self.params_for = params_for

    def plans(self, gpu: int | None) -> Callable[[], list[PlanAndPredictions]]:
        """The MIG plan of one or every MIG-capable GPU, with what `auto` makes of it now
        (policy.mig_payoff; None where it would not weigh it) and the queue's drain time with
        its layout (policy.mig_queue_time; None: nothing to weigh). Raises MigError. The GPUs
        are read and planned here, on the loop; the queue's replays (about 0.4 s for 4 GPUs and
        a long queue) are returned, to run off the loop on their own copies of what they use."""
        backend = self.telemetry.monitor.backend
        queue, running = self.queued(), self.running_by_gpu()
        config = self.station.config
        gpus, manager = read_gpus(backend, running)  # one read: nvidia-smi on a real station
        plans = station_plans(
            gpus,
            manager,
            queue,
            repartition_allowed=config.mig_repartition,
            simulated=backend.simulated,
            gpu=gpu,
        )
        params = {g.name: self.params_for(g.name) for g in gpus}
        snapshot = self.telemetry.snapshot()
        count = len(snapshot.gpus) if snapshot is not None else 1
        from gpudesk.policy import mig_replay as mig  # the simulator: asked for, not at start

        note = mig.auto_note(config.mig_repartition, config.repartitions_on_its_own, config.policy)

        def replay() -> list[PlanAndPredictions]:
            choices = mig.choose_layouts(
                gpus,
                queue,
                params.__getitem__,
                simulated=backend.simulated,
                commands_from=manager,
                drain=mig.drain(params.__getitem__),
            )
            said = mig.auto_said(choices, plans, note)
            by_index = {g.index: g for g in gpus}
            return [
                (
                    plan,
                    said.get(plan.gpu),
                    _queue_time(by_index[plan.gpu], plan, queue, params, count),
                )
                for plan in plans
            ]

        return replay

    def apply(self, gpu: int, profiles: Sequence[str], confirm: bool) -> MigApplied:
        """Give an idle MIG-mode GPU this layout, destroying its instances, only where
        [station] mig_repartition allows it and only with `confirm`. Raises MigError:
        MigApplyRefused (MigNotConfirmed among them), MigUsageError, or nvidia-smi's."""
        simulated = self.telemetry.monitor.simulated
        change, _ = check_change(
            self.telemetry.monitor.backend,
            gpu,
            profiles,
            self.running_by_gpu(),
            repartition_allowed=self.station.config.mig_repartition,
        )
        previous = tuple(change.gpu.current)
        if change.unchanged:
            message = f"GPU {gpu} already has this layout; nothing was changed"
            return MigApplied(
                gpu, previous, change.profiles, change.commands, simulated, False, message
            )
        if not confirm:
            raise MigNotConfirmed(
                f"not confirmed: applying destroys GPU {gpu}'s MIG instances "
                f"({', '.join(previous) or 'none'}) and creates "
                f"{', '.join(change.profiles)}; send confirm: true to apply it",
                (),
            )
        devices: tuple[MigSlot, ...] = ()
        if simulated:
            self._set_simulated_layout(gpu, change.profiles)
        else:
            try:
                devices = tuple(apply_on_gpu(change))
            except MigError as exc:
                self.store.add_event("mig", f"MIG layout of GPU {gpu} not applied: {exc}")
                raise
        # A sample is stamped when its read begins: one begun while nvidia-smi was still
        # destroying and creating instances may show the GPU with none, and placement would
        # find no slice for the jobs this layout was made for (and not look again until
        # something else changed). Wait for one begun after the change.
        changed_at = time.time()
        message = (
            f"MIG layout of GPU {gpu} applied: {', '.join(change.profiles)} (was "
            f"{', '.join(previous) or 'no instances'})" + (" [SIMULATED]" if simulated else "")
        )
        log.info(message)
        self.store.add_event("mig", message)
        self.on_change()
        self.telemetry.await_sample_after(changed_at, SETTLE_S)
        return MigApplied(
            gpu, previous, change.profiles, change.commands, simulated, True, message, devices
        )

    def repartition_for_queue(self, queue: Sequence[QueuedDemand]) -> list[MigApplied]:
        """`auto`'s own repartitioning: each idle MIG-mode GPU whose planned layout pays by
        the model (policy.mig_payoff: more work now, and the queue as it is no slower by the
        simulator's replay of it) gets it, with an event saying why. Only where the
        station allows it (apply checks). Raises MigError."""
        from gpudesk.policy import mig_replay

        backend = self.telemetry.monitor.backend
        gpus, manager = read_gpus(backend, self.running_by_gpu())
        choices = mig_replay.choose_layouts(
            gpus,
            queue,
            self.params_for,
            simulated=backend.simulated,
            commands_from=manager,
            drain=mig_replay.drain(self.params_for),
        )
        applied = []
        for choice in choices:
            log.info("MIG repartition check: %s", choice.payoff.summary())
            if not choice.payoff.worth:
                continue
            summary = choice.payoff.summary()
            self.store.add_event("mig", f"repartitioning for the queue: {summary}")
            applied.append(self.apply(choice.plan.gpu, choice.payoff.planned, confirm=True))
            for start in choice.payoff.carved:  # `gpudesk show JOB` says why its slice exists
                self.store.add_event(
                    "mig",
                    f"GPU {choice.plan.gpu} repartitioned for it and the jobs queued with it "
                    f"(a {start.profile} slice for it, predicted speed {start.rate:.2f}): "
                    f"{summary}",
                    job_id=start.job_id,
                )
        return applied

    def _set_simulated_layout(self, gpu: int, profiles: tuple[str, ...]) -> None:
        """A simulated GPU's new layout: the station's `mig` table changes as a reconfigure
        would change it, and telemetry restarts on it."""
        config = self.station.config
        layout = {**(config.mig or {}), str(gpu): ",".join(profiles)}
        try:
            changed = StationConfig.from_dict({**config.to_dict(), "mig": layout})
        except ValueError as exc:
            raise MigUsageError(str(exc)) from None
        self.station.replace(changed)
        self.telemetry.restart()


def _queue_time(
    gpu: GpuMigState,
    plan: MigPlan,
    queue: Sequence[QueuedDemand],
    params: Mapping[str, ModelParams],
    station_gpus: int,
) -> QueueTimeView | None:
    """The queue's drain time with the plan's layout (else the GPU's own) against the whole
    GPU; None where nothing is weighed. A replay that fails is logged, never the plan's
    failure: the plan stands without it."""
    from gpudesk.policy.mig_replay import times as replayed

    layout = plan.wanted_profiles or list(gpu.current)
    try:
        times = replayed(gpu, layout, queue, params[gpu.name], station_gpus)
    except Exception:
        log.exception("could not predict the queue's drain time on GPU %d", gpu.index)
        return None
    return None if times is None else times.view()
