"""A job that cannot start on the station as its GPUs are set up now: the policies hold no GPU
for it, CARMA's queue does not block behind it, and its reason names the change that would let
it start (gpudesk.policy.station_fit)."""

from __future__ import annotations

import msgspec
from test_placement_hot_path import GIB, SLICES, _gpu, _job, _station

from gpudesk.policy.carma import CarmaPolicy
from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.policy import (
    RESERVE_MIB,
    FifoPolicy,
    GpuState,
    describe_gpus,
    gpu_job_impossible,
    index_list,
)

MIG_GPU = GpuState(1, "GPU-1", 40 * GIB, mig_enabled=True, mig_slices=SLICES)


def test_gpu_indices_and_the_station_read_as_people_write_them() -> None:
    assert [index_list(i) for i in ([0, 1, 2], [1, 3], [0, 1, 2, 5], [2])] == [
        "0-2",
        "1, 3",
        "0-2, 5",
        "2",
    ]
    assert describe_gpus(_station(_gpu(0), _gpu(1))) == "2 GPUs (0, 1)"
    lost = GpuState(2, "GPU-2", 40 * GIB, lost=True)
    assert describe_gpus(_station(_gpu(0), MIG_GPU, lost)) == (
        "1 whole GPU (0), GPU 1 in MIG mode (slices 3g.20gb, 1g.5gb) and GPU 2 lost"
    )


def test_no_gpu_is_held_for_a_job_that_needs_more_whole_gpus_than_are_set_up() -> None:
    # two whole GPUs needed, one whole and one in MIG mode: the two-GPU job cannot start until
    # an admin acts; holding GPU 0 for it would push the light job onto a slice for nothing
    view = _station(_gpu(0), MIG_GPU)
    two, light = _job(1, 2, 4.0, 30.0), _job(2, 1, 4.0, 30.0)
    policy = SharingPolicy("auto")
    assert policy.reserve(two, view) == set()
    (placed,) = policy.place([two, light], view).placements
    assert (placed.job_id, placed.gpus, placed.mig_slice) == (2, (0,), None)
    why = policy.explain_wait(two, [two, light], view)
    assert why.startswith("waiting for an admin: it needs 2 whole GPUs; this station has ")
    assert why.endswith(
        "Leaving MIG mode on GPU 1 (on this simulated station: GPU 1 out of the [station] mig "
        "layout) would let it start"
    )


def test_carmas_queue_does_not_block_behind_a_job_no_gpu_as_set_up_can_run() -> None:
    view = _station(_gpu(0), MIG_GPU)
    two, light = _job(1, 2, 4.0, 30.0), _job(2, 1, 4.0, 30.0)
    (placed,) = CarmaPolicy().place([two, light], view).placements
    assert (placed.job_id, placed.gpus) == (2, (0,))
    # a job CARMA could run once GPU 0 drains still blocks the head of the queue, as published
    busy = _station(_gpu(0, 90.0, sm_activity_pct=95.0), MIG_GPU)
    assert CarmaPolicy().place([_job(3, 1, 30.0, 90.0), light], busy).placements == []


def test_a_job_larger_than_every_slice_names_the_layouts_that_would_hold_it() -> None:
    view = _station(GpuState(0, "GPU-0", 40 * GIB, mig_enabled=True, mig_slices=SLICES))
    big = _job(1, 1, 30.0, 30.0)
    why = SharingPolicy("auto").explain_wait(big, [big], view)
    assert why == (
        "waiting for an admin: it needs 30.0 GiB on one GPU; this station has no whole GPU and "
        "GPU 0 in MIG mode (slices 3g.20gb, 1g.5gb), and no slice there holds 30.0 GiB. "
        "Leaving MIG mode on GPU 0 (on this simulated station: GPU 0 out of the [station] mig "
        "layout), or a layout with a slice that holds it (on this simulated station: 7g.40gb "
        "for GPU 0 in the [station] mig layout), would let it start"
    )
    # on real GPUs, the commands an admin runs
    real = msgspec.structs.replace(view, simulated=False)
    said = SharingPolicy("auto").explain_wait(big, [big], real)
    assert said.endswith(
        "Leaving MIG mode on GPU 0 (as root, with nothing running there: nvidia-smi -i 0 -mig "
        "0), or a layout with a slice that holds it (gpudesk mig apply --gpu 0 7g.40gb), would "
        "let it start"
    ), said
    # where the engine may relay the idle GPU for the queue, it waits for that, not an admin
    relaid = _station(view.gpu_states[0], repartition=True)
    assert SharingPolicy("auto").reserve(big, relaid) == {0}
    assert SharingPolicy("auto").explain_wait(big, [big], relaid).startswith("waiting (hint")


def test_a_job_waiting_for_a_lost_gpu_says_so_and_a_plain_wait_ends_cleanly() -> None:
    lost = GpuState(1, "GPU-1", 40 * GIB, lost=True)
    two = _job(1, 2, 4.0, 30.0)
    why = SharingPolicy("auto").explain_wait(two, [two], _station(_gpu(0), lost))
    assert why == (
        "waiting for a lost GPU: it needs 2 whole GPUs; this station has 1 GPU (0) and GPU 1 "
        "lost. It can start once GPU 1 is back"
    )
    # nothing busy to list, nothing ahead: the reason ends with what the job needs
    idle = SharingPolicy("auto").explain_wait(two, [two], _station(_gpu(0), _gpu(1)))
    assert idle == "waiting (hint demand: needs 2 idle GPUs)"


def test_a_job_only_a_lost_gpu_holds_waits_for_it_instead_of_being_refused() -> None:
    """The 80 GB GPU fell off the bus, the 40 GB one is left: a 60 GiB job is neither refused at
    submit nor failed in the queue; it waits for the lost GPU, and says so."""
    lost = GpuState(0, "GPU-0", 80 * GIB, lost=True)
    view = _station(lost, _gpu(1))
    big = _job(1, 1, 60.0, 30.0)
    assert gpu_job_impossible(1, 60 * GIB, view, RESERVE_MIB) is None
    for policy in (SharingPolicy("auto"), CarmaPolicy(), FifoPolicy()):
        assert policy.place([big], view).rejections == [], policy.name
    assert SharingPolicy("auto").explain_wait(big, [big], view) == (
        "waiting for a lost GPU: it needs 60.0 GiB on one GPU; this station has 1 GPU (1) and "
        "GPU 0 lost. It can start once GPU 0 is back"
    )
    # every GPU lost: nothing is refused for its memory (a 0 GiB job least of all)
    gone = _station(lost, GpuState(1, "GPU-1", 40 * GIB, lost=True))
    assert gpu_job_impossible(1, 0.0, gone) is None
    # a hint above even the lost GPU is no reason to refuse (it is taken as unknown); a need
    # measured beyond it (an OOM alone on a whole GPU) is, its size named
    assert gpu_job_impossible(1, 100 * GIB, view) is None
    refused = gpu_job_impossible(1, 100 * GIB, view, measured=True)
    assert refused is not None and "the largest GPU here has 80.0 GiB" in refused
