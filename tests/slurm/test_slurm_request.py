"""The Slurm mapping without a cluster: gres choices from a job and an offer, the placement mode
each gres stands for, time limits, sinfo's offer, and which jobs share an array."""

from __future__ import annotations

import pytest

from gpudesk.core.cluster import ClusterSpec
from gpudesk.core.jobs import JobSpec
from gpudesk.slurm.request import (
    GresOffer,
    SlurmMappingError,
    gres_choice,
    gres_mode,
)
from gpudesk.slurm.script import plan
from gpudesk.units import sbatch_time

# what the test cluster's `sinfo -h -o %G` printed (tests/slurm_cluster.py)
OFFER = GresOffer.parse(["gpu:a100:2,gpu:1g.10gb:2,mps:100,shard:4(S:0)"])


def _job(**keys: object) -> JobSpec:
    return JobSpec(name="j", command=("true",), **keys)  # type: ignore[arg-type]


def test_offer_is_read_from_sinfo() -> None:
    assert OFFER.gpu_types == ("a100",)
    assert OFFER.mig_profiles == ("1g.10gb",)
    assert OFFER.mps and OFFER.shard and OFFER.known


@pytest.mark.parametrize(
    ("job", "cluster", "offer", "gres", "mode"),
    [
        ({}, ClusterSpec(), OFFER, None, "cpu"),
        ({"gpus": 1}, ClusterSpec(), OFFER, "gpu:1", "exclusive"),
        ({"gpus": 2}, ClusterSpec(gpu_type="a100"), OFFER, "gpu:a100:2", "exclusive"),
        ({"gpus": 1, "memory_gb": 8}, ClusterSpec(), OFFER, "gpu:1g.10gb:1", "mig"),
        ({"gpus": 1, "memory_gb": 40}, ClusterSpec(), OFFER, "gpu:1", "exclusive"),
        ({"gpus": 1, "sm_pct": 49.5}, ClusterSpec(), OFFER, "mps:50", "mps"),
        ({"gpus": 1}, ClusterSpec(share="timeslice"), OFFER, "shard:1", "naive"),
        # not asked: no share is assumed
        ({"gpus": 1, "memory_gb": 8}, ClusterSpec(), GresOffer(), "gpu:1", "exclusive"),
    ],
)
def test_gres_choice_and_the_mode_it_stands_for(
    job: dict, cluster: ClusterSpec, offer: GresOffer, gres: str | None, mode: str
) -> None:
    chosen = gres_choice(_job(**job), cluster, offer)
    assert (chosen.value if chosen else None) == gres
    assert gres_mode(gres) == mode


@pytest.mark.parametrize(
    ("job", "cluster", "said"),
    [
        ({"gpus": 2}, ClusterSpec(share="mps"), "only a one-GPU job can share"),
        ({"gpus": 1}, ClusterSpec(share="mps"), "names none"),
        ({"gpus": 1}, ClusterSpec(mig_profile="7g.80gb"), "offers no such gres"),
        ({"gpus": 1, "memory_gb": 80}, ClusterSpec(share="mig"), "no MIG profile"),
    ],
)
def test_what_cannot_be_asked_is_refused(job: dict, cluster: ClusterSpec, said: str) -> None:
    with pytest.raises(SlurmMappingError, match=said):
        gres_choice(_job(**job), cluster, OFFER)


def test_time_limits_as_sbatch_takes_them() -> None:
    assert sbatch_time(90) == "00:01:30"
    assert sbatch_time(2.5 * 86400) == "2-12:00:00"


def test_a_sweep_with_equal_resources_is_one_array() -> None:
    sweep = [_job(sweep="s", group="g", gpus=1) for _ in range(3)]
    other = _job(sweep="s", group="g", gpus=2)  # asks for more: a job of its own
    alone = _job(gpus=1)
    submissions = plan([*sweep, other, alone], ClusterSpec(), OFFER)
    assert [len(s.tasks) for s in submissions] == [3, 1, 1]
    assert submissions[0].is_array and submissions[0].array_name == "s"
    assert not submissions[1].is_array


def test_a_begin_time_and_a_comment_go_to_sbatch_as_its_own() -> None:
    import time

    from gpudesk.slurm.request import sbatch_options
    from gpudesk.slurm.script import render

    begin = time.time() + 600
    job = _job(begin_at=begin, comment="lr sweep; take 2")
    options = {o.flag: o for o in sbatch_options(job, ClusterSpec(), OFFER)}
    # sbatch's absolute form, local time: the same moment whenever the script is submitted
    parsed = time.mktime(time.strptime(options["--begin"].value, "%Y-%m-%dT%H:%M:%S"))
    assert int(begin) - 1 <= parsed <= begin
    assert options["--comment"].value == "lr sweep; take 2"
    (submission,) = plan([job], ClusterSpec(), OFFER)
    script = render(submission, output="/tmp/out.log")
    assert '#SBATCH --comment="lr sweep; take 2"' in script
    assert "--begin" not in {o.flag for o in sbatch_options(_job(), ClusterSpec(), OFFER)}
