"""Which shared loader the desk's job detail shows for a job: its dataset's, or the variant the
engine runs for the job's own selection."""

from __future__ import annotations

from gpudesk.screens.job import job_loader

LOADERS = [
    {"name": "digits", "status": {"selection": {"preset": "dedup-25"}}},
    {"name": "digits.random-25", "status": {"selection": {"preset": "random-25"}}},
    {"name": "digits.full", "status": {"selection": None}},
]


def test_a_job_reads_its_datasets_loader_or_the_variant_for_its_selection() -> None:
    assert job_loader({"dataset": "digits"}, LOADERS)["name"] == "digits"
    assert job_loader({"dataset": "digits", "selection": "dedup-25"}, LOADERS)["name"] == "digits"
    assert job_loader({"dataset": "digits", "selection": "random-25"},
                      LOADERS)["name"] == "digits.random-25"
    assert job_loader({"dataset": "digits", "selection": "full"}, LOADERS)["name"] == "digits.full"
    assert job_loader({"dataset": "other"}, LOADERS) is None
