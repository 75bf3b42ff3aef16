"""A memory hint corrected by how far its command family's hints were off (issue 39, item 2:
the second member of a sweep benefits from what the first measured): `policy.hint_correction`,
and the simulator replaying a sweep whose estimator guesses twice its jobs' peaks (SIMULATED)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest

from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.core.station import StationConfig
from gpudesk.policy.carma import CarmaPolicy
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.demand import Demand
from gpudesk.policy.hint_correction import CORRECTED_SOURCE, HintRatios
from gpudesk.policy.policy import GpuState, StationView, Tenant
from gpudesk.policy.simulator import Simulation
from gpudesk.policy.trace import load_trace
from gpudesk.units import MIB_PER_GB

SWEEP = Path(__file__).resolve().parents[2] / "traces" / "sweep-day-a100x4.json"


def hinted(memory_mib: float) -> Demand:
    return Demand(memory_mib, 30.0, "hint")


def test_one_size_measured_corrects_nothing() -> None:
    ratios = HintRatios()
    ratios.learn("resnet", 8000.0, 4000.0)
    ratios.learn("resnet", 8000.0, 4000.0)  # the same size again says nothing new
    assert ratios.factor("resnet") is None
    assert ratios.corrected("resnet", hinted(30000.0)) == hinted(30000.0)


def test_two_sizes_that_agree_scale_the_next_hint_by_the_largest_ratio() -> None:
    ratios = HintRatios()
    assert ratios.learn("resnet", 8000.0, 4000.0) == 0.5
    assert ratios.learn("resnet", 15000.0, 7200.0) == 0.48
    assert ratios.factor("resnet") == 0.5
    corrected = ratios.corrected("resnet", hinted(29000.0))
    assert (corrected.memory_mib, corrected.source) == (14500.0, CORRECTED_SOURCE)
    # another family, and figures that are not hints, are left as they are
    assert ratios.corrected("vit", hinted(29000.0)) == hinted(29000.0)
    for source in ("history", "default", "after OOM"):
        assert ratios.corrected("resnet", Demand(29000.0, 30.0, source)).memory_mib == 29000.0


def test_a_hint_too_small_is_left_to_the_jobs_own_measurement() -> None:
    ratios = HintRatios()
    ratios.learn("bert", 2000.0, 5000.0)
    ratios.learn("bert", 4000.0, 9000.0)
    assert ratios.factor("bert") is None
    assert ratios.corrected("bert", hinted(3000.0)).memory_mib == 3000.0
    ratios.learn("bert", 8000.0, 7000.0)  # one size too large, two too small: no factor
    assert ratios.factor("bert") is None


def test_sizes_whose_ratios_disagree_correct_nothing() -> None:
    # the CARMA trace's GPUMemNet guesses for Inception: 0.65 x at one size, 1.11 x at another
    ratios = HintRatios()
    ratios.learn("inception", 16000.0, 10460.0)
    ratios.learn("inception", 24000.0, 26750.0)
    assert ratios.factor("inception") is None


def test_a_run_told_again_changes_nothing_and_a_size_keeps_its_largest_ratio() -> None:
    ratios = HintRatios()
    assert ratios.learn("resnet", 8000.0, 4000.0) == 0.5
    assert ratios.learn("resnet", 8000.0, 4000.0) == 0.5  # the simulator tells it every pass
    assert ratios.ratios == {"resnet": {8000: 0.5}}
    ratios.learn("resnet", 8000.0, 3000.0)  # a member of the same size that held less
    ratios.learn("resnet", 8000.0, 4400.0)  # ... and one that held more
    assert ratios.ratios == {"resnet": {8000: 0.55}}


def start_of(sim: Simulation, job_id: int) -> float:
    (run,) = (r for r in sim.runs if r.job.id == job_id)
    assert run.first_start is not None
    return run.first_start


@pytest.mark.parametrize("policy", ["auto", "carma"])
def test_a_sweeps_largest_members_start_once_the_smaller_ones_settled(policy: str) -> None:
    """Horus guesses the sweep's ResNet-50 members at 2.0-2.2 x their peaks: the batch-128
    members (hinted 28.9 GB, peak 13.2 GB) do not fit beside a batch-32 and a batch-64 member on
    their hints. Before, auto left them waiting for a GPU to drain (34 minutes), 6.7 % behind
    CARMA, which reads the GPUs' measured memory; with the smaller members' ratios learned once
    their memory settled, auto starts them minutes after they arrive. CARMA places on the hint
    as published, unchanged."""
    trace = load_trace(SWEEP)
    sim = Simulation(trace, policy=policy, estimator="horus")
    result = sim.run()
    assert result.lost == 0 and result.oom_crashes == 0
    waits = [start_of(sim, j) - trace.jobs[j - 1].arrival_s for j in (9, 10, 11, 12)]
    assert max(waits) < 6 * 60, waits  # arrived within the first minute; measured 4.5 min
    if policy == "auto":
        carma = Simulation(trace, policy="carma", estimator="horus").run()
        assert result.makespan_s <= carma.makespan_s
        assert result.mean_jct_s <= carma.mean_jct_s


def test_carma_places_on_the_hint_as_given_and_auto_on_the_corrected_one() -> None:
    """The station gives every policy the corrected hint (the engine and the simulator alike);
    CARMA, the published baseline, takes the hint as the user gave it. One GPU holds 20 GiB
    (measured and reserved); a job hinted at 30 GB, corrected to 15 GB by its family, fits
    beside it only on the corrected figure."""
    tenant = Tenant(100, "mps", 20 * 1024.0, 20.0)
    gpu = GpuState(0, "GPU-0", 40536.0, tenants=(tenant,), mps_usable=True)
    gpu = dataclasses.replace(gpu, memory_used_mib=20 * 1024.0)
    spec = JobSpec(name="b128", command=("train.py",), gpus=1, memory_gb=30.0, sm_pct=30.0)
    job = JobRecord.queued(1, spec, 0.0)
    corrected = Demand(15.0 * MIB_PER_GB, 30.0, CORRECTED_SOURCE)
    view = StationView(
        StationConfig(slots=2),
        cores=8,
        backend="sim:x",
        gpu_states=(gpu,),
        simulated=True,
        demands={1: corrected},
    )
    assert [p.job_id for p in SharingPolicy("auto").place([job], view).placements] == [1]
    assert CarmaPolicy().place([job], view).placements == []
    assert CarmaPolicy().place([job], msgspec.structs.replace(view, demands={})).placements == []


def test_a_hint_is_learned_when_its_run_settles_though_nothing_waits(tmp_path: Path) -> None:
    # two sizes of family m start at once on an empty station and end before anything else
    # arrives: no job waits while they settle, so no placement pass runs then. The engine
    # learns each settled peak on its telemetry tick all the same; so must the simulator (it
    # learned only during passes: the sweep day's batch-128 members, the first of each burst
    # to end, were never learned, and the fourth burst waited on their raw hints)
    import json

    jobs = [
        {"id": 1, "model": "m", "estimate_gpumemnet_mb": 16000, "peak_memory_mb": 7000},
        {"id": 2, "model": "m", "estimate_gpumemnet_mb": 24000, "peak_memory_mb": 13000},
        {
            "id": 3,
            "model": "m",
            "arrival_s": 3600,
            "estimate_gpumemnet_mb": 24000,
            "peak_memory_mb": 13000,
        },
    ]
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {
                "name": "t",
                "jobs": [
                    {"arrival_s": 0, "exclusive_minutes": 30, "class": "light", **j} for j in jobs
                ],
            }
        )
    )
    sim = Simulation(load_trace(path), policy="auto", station="sim:a100-40gbx2")
    seen: dict[int, Demand] = {}
    place = sim._place

    def spy(view: StationView) -> object:
        seen.update(view.demands)
        return place(view)

    sim._place = spy  # type: ignore[method-assign]
    sim.run()
    assert seen[3].source == CORRECTED_SOURCE
    assert seen[3].memory_mib == pytest.approx(24000 * 13000 / 24000)
