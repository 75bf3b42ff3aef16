"""Which shared loader the desk's job detail shows for a job: the one the engine says it reads
(its dataset's, or the variant the engine runs for the job's own selection)."""

from __future__ import annotations

from gpudesk.screens.job import job_loader

LOADERS = [
    {"name": "digits", "status": {"selection": {"preset": "dedup-25"}}},
    {"name": "digits.random-25", "status": {"selection": {"preset": "random-25"}}},
    {"name": "digits.full", "status": {"selection": None}},
]


def job(dataset: str, loader: str | None) -> dict:
    return {"spec": {"dataset": dataset}, "loader": loader}


def test_a_job_reads_the_loader_the_engine_names() -> None:
    assert job_loader(job("digits", "digits"), LOADERS)["name"] == "digits"
    assert job_loader(job("digits", "digits.random-25"), LOADERS)["name"] == "digits.random-25"
    assert job_loader(job("digits", "digits.full"), LOADERS)["name"] == "digits.full"
    assert job_loader({"spec": {"dataset": "digits"}}, LOADERS)["name"] == "digits"  # not said
    assert job_loader(job("other", None), LOADERS) is None
