"""`gpudesk show`'s words for a waiting GPU job (gpudesk/policy/wait_words.py) name the GPUs
the last placement pass held and the job they are held for: a job that could share a GPU held
for a multi-GPU job ahead of it was told only that no GPU gained."""

from __future__ import annotations

from dataclasses import replace

import msgspec
from test_collocation import gpu, job, station, tenant  # same folder: on sys.path under pytest

from gpudesk.policy.collocation import SharingPolicy
from gpudesk.policy.policy import StationView

TWO_GPU, LIGHT = 1, 2


def view() -> StationView:
    # GPU 0 full; GPUs 1 and 2 each with one 30 % tenant: the two-GPU job ahead waits for
    # two of them to drain, and they are held for it from its first wait
    return station(
        gpu(0, tenant(10, 38, 90)), gpu(1, tenant(11, 10, 30)), gpu(2, tenant(12, 10, 30))
    )


def test_a_job_kept_off_a_held_gpu_is_told_for_which_job_it_is_held() -> None:
    two_gpu, light = job(TWO_GPU, 10, 90, gpus=2), job(LIGHT, 10, 20)
    policy = SharingPolicy("auto")
    # alone in the queue the light job would join GPU 1 or 2 at once
    assert [p.job_id for p in policy.place([light], view()).placements] == [LIGHT]
    decision = policy.place([two_gpu, light], view())
    assert decision.placements == [] and decision.held == {1: TWO_GPU, 2: TWO_GPU}
    # the engine's view carries what its last pass held (StationView.held)
    seen = msgspec.structs.replace(view(), held=decision.held)
    said = policy.explain_wait(light, [two_gpu, light], seen)
    assert "GPU 1: 29.5 GiB free, SM demand 30%, held for job 1 (waiting ahead of it)" in said
    assert "GPU 2: 29.5 GiB free, SM demand 30%, held for job 1" in said
    own = policy.explain_wait(two_gpu, [two_gpu, light], seen)
    assert "GPU 1: 29.5 GiB free, SM demand 30%, held for it until it starts" in own


def test_nothing_is_said_held_where_nothing_is() -> None:
    light = job(LIGHT, 10, 20)
    said = SharingPolicy("auto").explain_wait(light, [light], station(gpu(0, tenant(10, 38, 90))))
    assert "held for" not in said


def test_gpus_held_for_a_job_numbered_0_are_said_held() -> None:
    """A trace may number its jobs from 0 (`gpudesk simulate` keeps a trace's ids): the pass
    said nothing held for job 0, its id being taken for "none"."""
    two_gpu, light = job(0, 10, 90, gpus=2), job(LIGHT, 10, 20)
    decision = SharingPolicy("auto").place([two_gpu, light], view())
    assert decision.placements == [] and decision.held == {1: 0, 2: 0}


def test_each_gpus_drain_and_the_held_for_jobs_start_are_said_where_estimated() -> None:
    """Where every tenant of a GPU has a remaining time (its progress, or its family's history)
    the words say when the GPU drains, and the job GPUs are held for is told when it should
    start: once the last of its held GPUs has drained. Unknown anywhere: nothing is said."""
    two_gpu, light = job(TWO_GPU, 10, 90, gpus=2), job(LIGHT, 10, 20)
    known = station(
        gpu(0, replace(tenant(10, 38, 90), remaining_s=3000.0)),
        gpu(1, replace(tenant(11, 10, 30), remaining_s=600.0)),
        gpu(2, replace(tenant(12, 10, 30), remaining_s=900.0)),
    )
    policy = SharingPolicy("auto")
    decision = policy.place([two_gpu, light], known)
    assert decision.held == {1: TWO_GPU, 2: TWO_GPU}
    seen = msgspec.structs.replace(known, held=decision.held)
    own = policy.explain_wait(two_gpu, [two_gpu, light], seen)
    assert "GPU 0: 1.5 GiB free, SM demand 90%, drains in ~50m00s" in own
    assert "GPU 1: 29.5 GiB free, SM demand 30%, drains in ~10m00s, held for it" in own
    assert "expected to start in ~15m00s, once the GPUs held for it have drained" in own
    # the light job behind is told the drains, not a start of its own
    said = policy.explain_wait(light, [two_gpu, light], seen)
    assert "drains in ~15m00s, held for job 1" in said and "expected to start" not in said
    # one held GPU's tenant with no estimate: no start is promised
    unknown = msgspec.structs.replace(
        seen,
        gpu_states=(
            seen.gpu_states[0],
            seen.gpu_states[1],
            gpu(2, tenant(12, 10, 30)),
        ),
    )
    own = policy.explain_wait(two_gpu, [two_gpu, light], unknown)
    assert "expected to start" not in own and "GPU 2: 29.5 GiB free, SM demand 30%, held" in own
