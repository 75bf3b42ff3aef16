"""`edit` of a Slurm job, against a real single-node Slurm (tests/slurm_cluster.py): Slurm holds
its spec once sbatch took it, so gpudesk changes none of its fields and says which `scontrol
update` does, naming the fields asked; the job runs as submitted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import EngineHandle
from slurm_cluster import engine_on, missing_reason, running_cluster

from gpudesk.api.errors import EngineError

pytestmark = [
    pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or ""),
    pytest.mark.xdist_group("test_slurm_edit"),
]


@pytest.fixture(scope="module")
def slurm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    """A cluster, and an engine whose submitters' environment names it (as test_slurm's)."""
    with (
        running_cluster(tmp_path_factory.mktemp("slurm")) as cluster,
        engine_on(cluster, tmp_path_factory.mktemp("home")) as handle,
    ):
        yield handle


def test_a_pending_slurm_job_is_refused_naming_scontrol_update(
    slurm_engine: EngineHandle,
) -> None:
    cluster = {"kind": "slurm", "partition": "gpu"}
    parent, child = slurm_engine.submit(
        {"name": "parent", "command": ["sleep", "30"], "cluster": cluster},
        {"name": "child", "command": ["true"], "after": [-1], "cluster": cluster},
    )
    slurm_id = slurm_engine.show(child).job.slurm.job_id  # type: ignore[union-attr]
    assert slurm_engine.job(child).state == "queued"  # pending in Slurm on its dependency
    with pytest.raises(EngineError) as info:
        slurm_engine.api.edit_job(child, {"name": "renamed", "time_limit_s": 60})
    assert info.value.code == "refused"
    message = str(info.value)
    assert f"job {child} is a Slurm job (queued)" in message
    assert "none of the fields asked (name, time) was changed" in message
    assert f"scontrol update JobId={slurm_id} TimeLimit=" in message
    shown = slurm_engine.show(child)
    assert (shown.job.name, shown.job.spec.time_limit_s) == ("child", None)
    assert "edit" not in [e.kind for e in shown.events]
    slurm_engine.api.cancel([parent, child], grace=0)
    slurm_engine.wait_all_done([parent, child], timeout=60)
