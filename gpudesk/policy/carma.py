"""CARMA, the published baseline gpudesk's placement is measured against: FIFO without
backfilling, idle GPUs first, then the GPU with the most free memory as measured; admit when
free >= need + 2 GiB after a 512 MiB reserve and SM activity < 80 %; a job that crashed reruns
alone on an idle GPU. It shares `SharingPolicy`'s station bookkeeping, not its model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpudesk.core.records import JobRecord
from gpudesk.policy.collocation import (
    CARMA_WINDOW_S,
    SATURATED_SM_PCT,
    SharingPolicy,
    demand_of,
    given_room,
)
from gpudesk.policy.demand import MARGIN_MIB, Demand
from gpudesk.policy.filled_station import Choice, FilledStation
from gpudesk.policy.placement_reasons import idle_share_reason, mps_serves_other
from gpudesk.policy.policy import (
    RESERVE_MIB,
    Decision,
    Rejection,
    StationView,
    cpu_placement,
    gpu_job_impossible,
)
from gpudesk.policy.station_fit import MigRules, runs_as_is


class CarmaPolicy(SharingPolicy):
    """CARMA's published rules, as the baseline gpudesk is measured against."""

    def __init__(self) -> None:
        super().__init__("auto")
        self.name = "carma"
        # CARMA places processes on whole GPUs: a GPU in MIG mode runs none of its jobs
        self.rules = MigRules(slices=False, whole_when_dynamic=False)
        # CARMA places on the estimator's guess: a hint the station corrected is not its own
        self.hints_as_given = True

    def place(self, queue: Sequence[JobRecord], station: StationView) -> Decision:
        plan = FilledStation({g.index: g for g in station.gpu_states})
        cpu_slots = station.free_slots
        rejections: list[Rejection] = []
        for job in queue:
            if not job.spec.gpus:
                if cpu_slots:
                    plan.placements.append(cpu_placement(job, cpu_slots.pop(0), station))
                continue
            demand = demand_of(job, station, self.hints_as_given)
            measured = demand.source == "after OOM"
            impossible = gpu_job_impossible(
                job.spec.gpus, demand.memory_mib, station, RESERVE_MIB, measured
            )
            if impossible:
                rejections.append(Rejection(job.id, f"the job {impossible}"))
                continue
            choice = self.choose(job, demand, plan, station)
            if choice is None:
                if not runs_as_is(self.ask(job, demand), self.rules, station):
                    continue  # it cannot start before an admin's change: it blocks nobody
                break  # FIFO without backfilling: the head of the queue blocks the rest
            plan.take(job, given_room(demand, choice), choice, station)
        return Decision(plan.placements, rejections)

    def choose(
        self,
        job: JobRecord,
        demand: Demand,
        plan: FilledStation,
        station: StationView,
        exclude: set[int] | frozenset[int] = frozenset(),
        behind: Callable[[], int] = lambda: 0,
        queued_after: int = 0,
    ) -> Choice | None:
        # CARMA places processes on whole GPUs: a GPU in MIG mode cannot run them
        gpus = [g for g in plan.gpus.values() if not g.lost and not g.mig_enabled]
        idle = [g for g in gpus if g.idle]
        if job.spec.gpus > 1 or demand.exclusive:
            if len(idle) < job.spec.gpus:
                return None
            chosen = tuple(g.index for g in idle[: job.spec.gpus])
            return Choice(chosen, "exclusive", "CARMA: idle GPU, alone")
        if idle:
            gpu = idle[0]
            share = "mps" if gpu.mps_usable else "naive"
            why = idle_share_reason(gpu, share, demand, "auto")
            return Choice(
                (gpu.index,), share, f"CARMA: GPU {gpu.index} idle; {why}", mps_limits=False
            )
        # The GPU with the most free memory as measured (CARMA reads nvidia-smi).
        busy = sorted(
            (g for g in gpus if not g.exclusive),
            key=lambda g: (-(g.memory_total_mib - g.memory_used_mib), g.index),
        )
        if not busy:
            return None
        gpu = busy[0]
        if gpu.placed_s_ago is not None and gpu.placed_s_ago < CARMA_WINDOW_S:
            return None  # its measurements do not show the last job yet
        free = gpu.memory_total_mib - gpu.memory_used_mib - RESERVE_MIB
        if (
            free < demand.memory_mib + MARGIN_MIB
            or (gpu.sm_activity_pct or 0.0) >= SATURATED_SM_PCT
        ):
            return None
        share = gpu.tenants[0].mode if gpu.tenants else "naive"
        reason = f"CARMA: GPU {gpu.index} has the most free memory"
        other_user = mps_serves_other(gpu, job.owner.uid)
        if other_user:  # never an MPS client of another user's server
            share, reason = "naive", f"time-sliced: {other_user}; {reason}"
        return Choice((gpu.index,), share, reason, mps_limits=False)


def make_sharing_policy(name: str) -> SharingPolicy:
    if name == "carma":
        return CarmaPolicy()
    return SharingPolicy(name)
