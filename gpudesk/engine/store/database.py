"""Store: all reads and writes of the engine's database, one object for the daemon to hold."""

from __future__ import annotations

from gpudesk.engine.store.family_history import FamilyHistoryTables
from gpudesk.engine.store.job_changes import JobChangeTables
from gpudesk.engine.store.jobs import JobTables
from gpudesk.engine.store.listing import JobListing
from gpudesk.engine.store.model_params import ModelParamTables
from gpudesk.engine.store.samples import SampleTables
from gpudesk.engine.store.slurm import SlurmTables
from gpudesk.engine.store.suspension import SuspensionTables
from gpudesk.engine.store.tracking import TrackingTables


class Store(
    SlurmTables,
    JobChangeTables,
    SuspensionTables,
    JobTables,
    JobListing,
    SampleTables,
    ModelParamTables,
    TrackingTables,
    FamilyHistoryTables,
):
    """All reads and writes of the engine's database: its connection (`StoreConnection`), the
    jobs, their attempts (`JobTables`) and control (`JobChangeTables`), telemetry and measured
    demand (`SampleTables`), the interference model's learning (`ModelParamTables`), the MLflow
    runs, the jobs on Slurm, what each command family measured (`FamilyHistoryTables`)."""
