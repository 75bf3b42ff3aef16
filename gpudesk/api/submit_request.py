"""What a submission carries of its submitter besides the jobs: her working directory (a job's
without a `workdir`), her environment (`connection.submit_env`) and her umask, which the jobs
run with, as Slurm's sbatch records it in SLURM_UMASK (gpudesk.core.umask)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from gpudesk.core.jobs import JobSpec
from gpudesk.core.umask import current_umask
from gpudesk.core.wire.requests import SubmitArgs


def submit_args(
    specs: Sequence[JobSpec], env: Mapping[str, str] | None, **extra: Any
) -> SubmitArgs:
    """The `submit` (or `check_submit`) request of `specs`, from `env` (default: this
    process's, `submit_env`), with `extra`'s further arguments (`hold`, ...)."""
    from gpudesk.api.connection import submit_env

    here = os.getcwd()
    jobs = [
        (spec if spec.workdir else msgspec.structs.replace(spec, workdir=here)).to_dict()
        for spec in specs
    ]
    env = dict(env) if env is not None else submit_env()
    return SubmitArgs(jobs=jobs, env=env, umask=current_umask(), **extra)
