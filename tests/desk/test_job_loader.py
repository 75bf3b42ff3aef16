"""Which shared loader the desk's job detail shows for a job: the one the engine says it reads
(its dataset's, or the variant the engine runs for the job's own selection)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpudesk.screens.job import job_loader

# Stand-ins with only the fields job_loader reads (a LoaderView's name; a JobView's loader and
# spec.dataset).
LOADERS: list[Any] = [
    SimpleNamespace(name="digits"),
    SimpleNamespace(name="digits.random-25"),
    SimpleNamespace(name="digits.full"),
]


def job(dataset: str, loader: str | None) -> Any:
    return SimpleNamespace(spec=SimpleNamespace(dataset=dataset), loader=loader)


def loader_name(job: Any) -> str | None:
    found = job_loader(job, LOADERS)
    return None if found is None else found.name


def test_a_job_reads_the_loader_the_engine_names() -> None:
    assert loader_name(job("digits", "digits")) == "digits"
    assert loader_name(job("digits", "digits.random-25")) == "digits.random-25"
    assert loader_name(job("digits", "digits.full")) == "digits.full"
    assert loader_name(job("digits", None)) == "digits"  # not said: the dataset's
    assert loader_name(job("other", None)) is None
