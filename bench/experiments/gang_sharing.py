"""What letting a multi-GPU job time-slice beside other jobs would give `auto` (issue 39): the
one lever `bench/experiments/multi_gpu_cost.py` left untried, measured before it is built.

    python bench/experiments/gang_sharing.py [TRACE]   # default: the CARMA Philly trace (t1)

Today a multi-GPU job runs only on whole idle GPUs (`SharingPolicy._whole_gpus`), so it waits
for GPUs to drain and `auto` holds them for it: on t1 that wait is every target issue 39 still
misses there (multi_gpu_cost.py). It cannot join MPS clients: the engine runs one MPS server per
GPU (`hw/mps.py`) and a job's ranks on two GPUs cannot be clients of two servers. But it can
*time-slice*: a plain CUDA context beside a GPU's other contexts (an MPS server is one of them),
as a one-GPU job already may (`FilledStation.slicing`). Gandiva (OSDI '18) time-slices
multi-GPU jobs; AntMan (OSDI '20) shares their GPUs with opportunistic jobs.

Here, in the simulator only (nothing in the product changes):

- the policy: where too few GPUs are idle, a multi-GPU job may take any of its GPUs beside
  tenants, time-sliced (idle GPUs first, then those where the model's pessimistic end gives it
  the highest rate), if the station gains under the robust rule: `gpus` × its gang's worst rate
  less what its tenants lose, summed over its GPUs, above 0 (as a one-GPU job's option);
- the truth: the job is one more time-sliced context on each of its GPUs (so every tenant there
  is time-sliced, as `sim_rates.true_rates` treats an MPS server beside another context), and it
  runs at the *slowest* of its GPUs' rates (a rank waits for the others at every collective).
  ASSUMPTION, optimistic: no cost beyond that minimum (a rank that waits in an NCCL kernel
  spins through its own slice; a time-slice misaligned across GPUs would cost more).

Per row (the model's defaults as the truth; the trace whole and with its last GPU in MIG mode):
auto's makespan ÷ LB and mean JCT ÷ the mean run time alone, as today and with gang sharing;
the multi-GPU placements beside tenants, and how often a multi-GPU job found too few GPUs with
room for its memory or no gain beside their tenants (placement passes); and, beside the runnable
variant, one the engine cannot run (the job's ranks as MPS clients of each GPU's server), as a
bound on what sharing gang jobs could give. docs/benchmarks.md ("Session 32") has the figures.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its siblings

from simulator_judge import last_gpu_in_mig

import gpudesk.policy.sim_preemption as sim_preemption
import gpudesk.policy.simulator as simulator
from gpudesk.core.records import JobRecord
from gpudesk.examples import folder
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.demand import Demand, margin_mib
from gpudesk.policy.filled_station import IDLE, SHARED, Choice, FilledStation, Host
from gpudesk.policy.interference import DEFAULT_PARAMS, Workload, workload
from gpudesk.policy.policy import StationView
from gpudesk.policy.rates import Prediction
from gpudesk.policy.sim_bounds import bound_of
from gpudesk.policy.sim_rates import group_rates, true_rates
from gpudesk.policy.sim_records import SimRun
from gpudesk.policy.simulator import Simulation, load_trace


class GangAuto(SharingPolicy):
    """`auto`, except that a multi-GPU job may time-slice beside tenants (module docstring)."""

    def __init__(self, share: str = "naive") -> None:
        super().__init__("auto")
        self.share = share  # "naive": time-sliced; "mps": as a client of each GPU's server
        self.gangs = 0  # multi-GPU placements beside tenants
        # why a multi-GPU job found no GPUs to share, pass by pass: too few GPUs with room for
        # its memory (idle, or shared and not closed), or no gain under the robust rule
        self.no_room = self.no_gain = 0

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
        whole = super().choose(job, demand, plan, station, exclude, behind, queued_after)
        if whole is not None or job.spec.gpus == 1 or demand.exclusive or demand.unknown:
            return whole
        if demand.source == "after OOM":
            return None
        hosts = [
            h for h in plan.hosts(station, self.mode, job.owner.uid) if h.gpu.index not in exclude
        ]
        choice = self._gang(job, demand, plan, hosts)
        if choice is not None:
            self.gangs += 1
        return choice

    def _gang(
        self, job: JobRecord, demand: Demand, plan: FilledStation, hosts: list[Host]
    ) -> Choice | None:
        need = demand.admit_mib
        margin = margin_mib(demand)
        options: list[tuple[float, float, float, int]] = []  # (worst rate, nominal, lost, GPU)
        for host in hosts:
            if host.kind == IDLE and need <= host.room_mib:
                options.append((1.0, 1.0, 0.0, host.gpu.index))
            elif host.kind == SHARED and need + margin <= host.room_mib:
                if demand.heavy and host.heavy_tenant:
                    continue
                load = workload(demand.sm_pct, demand.membw_pct, host.params)
                worst, nominal = _beside(plan, host, load, self.share)
                options.append((worst.rate, nominal.rate, worst.rate - worst.gain, host.gpu.index))
        if len(options) < job.spec.gpus:
            self.no_room += 1
            return None
        options.sort(key=lambda o: (-o[0], o[3]))
        taken = options[: job.spec.gpus]
        worst_rate = min(o[0] for o in taken)
        value = job.spec.gpus * worst_rate - sum(o[2] for o in taken)
        if value <= 0.0:
            self.no_gain += 1
            return None
        gpus = tuple(sorted(o[3] for o in taken))
        return Choice(
            gpus,
            self.share,
            f"GPUs {','.join(map(str, gpus))}: beside their tenants ({self.share}, gang)",
            mps_limits=False,
            free_mib=min(h.room_mib for h in hosts if h.gpu.index in gpus),
            rate=min(o[1] for o in taken),
            value=value,
        )


def _beside(
    plan: FilledStation, host: Host, load: Workload, share: str
) -> tuple[Prediction, Prediction]:
    """The job beside the host's tenants, time-sliced or (`share` "mps", where the host's
    tenants are MPS clients) joining them: with the mechanism's costs at the top of their
    range, and at the model's values."""
    if share == "naive" and host.share == "mps":
        slicing = plan.slicing(host)
        return slicing.worst(load), slicing.nominal(load)
    return plan.worst(host)(load), plan.joining(host)(load)


def gang_true_rates(sim: Simulation) -> dict[int, float]:
    """`sim_rates.true_rates`, with a multi-GPU job that is not exclusive one more time-sliced
    context on each of its GPUs, at the slowest of its GPUs' rates."""
    gangs = [
        r
        for r in sim.running
        if len(r.placed.gpus) > 1 and r.placed.mode != "exclusive" and r.blocked_until <= sim.now
    ]
    if not gangs:
        return true_rates(sim)
    rates = true_rates(sim)
    by_gpu: dict[int, list[SimRun]] = {}
    for run in sim.running:
        placement = run.placed
        if placement.mode == "mig" or run.blocked_until > sim.now:
            continue
        if len(placement.gpus) == 1 or run in gangs:
            for gpu in placement.gpus:
                by_gpu.setdefault(gpu, []).append(run)
    gang_ids = {r.job.id for r in gangs}
    on: dict[int, list[float]] = {}
    for group in by_gpu.values():
        if not gang_ids.intersection(r.job.id for r in group):
            continue
        for r, v in zip(group, group_rates(sim, group), strict=True):
            if r.job.id in gang_ids:
                on.setdefault(r.job.id, []).append(v)
            else:
                rates[r.job.id] = v
    for job_id, values in on.items():
        rates[job_id] = min(values)
    return rates


def _row(label: str, trace_path: str, mig: str | None, gang: str | None) -> str:
    trace = load_trace(trace_path)
    sim = Simulation(trace, policy="auto", station=trace.sim_station, truth=DEFAULT_PARAMS, mig=mig)
    policy = GangAuto(gang) if gang else SharingPolicy("auto")
    sim.policy = policy
    result = sim.run()
    bound = bound_of(sim)
    gangs = "-"
    if isinstance(policy, GangAuto):
        gangs = f"{policy.gangs} ({policy.no_room} / {policy.no_gain})"
    return (
        f"| {label} | {'MIG GPU' if mig else 'whole'} | {result.makespan_s / 3600:.2f} h "
        f"({result.makespan_s / bound.makespan_s:.3f}) | {result.mean_jct_s / 60:.1f} min "
        f"({result.mean_jct_s / bound.mean_jct_s:.2f}) | {result.energy_kwh:.1f} | "
        f"{gangs} | {result.lost} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(folder("traces") / "carma-philly-t1.json"))
    args = parser.parse_args()
    trace = load_trace(args.trace)
    print(
        f"SIMULATED: {trace.name} on {trace.sim_station} under auto, the model's defaults as "
        "the truth\n"
    )
    print(
        "| variant | station | makespan (÷ LB) | mean JCT (÷ mean alone) | kWh "
        "| gangs (no room / no gain) | lost |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for mig in (None, last_gpu_in_mig(trace.sim_station)):
        print(_row("as it is", args.trace, mig, None), flush=True)
        simulator.true_rates = sim_preemption.true_rates = gang_true_rates  # type: ignore[assignment]
        try:
            print(_row("multi-GPU jobs time-slice", args.trace, mig, "naive"), flush=True)
            print(_row("multi-GPU jobs join MPS clients (not runnable)", args.trace, mig, "mps"))
        finally:
            simulator.true_rates = sim_preemption.true_rates = true_rates  # type: ignore[assignment]
    return 0


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
