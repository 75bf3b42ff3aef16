"""What earlier runs measured, and the demand it gives each job: raised after an out-of-memory
death, else its hints completed by what its owner's earlier runs measured (`owned`: per owner),
else defaults. They are looked up by the same command first (the measured-demand history, by
`demand.signature`), then by its command family (`gpudesk.policy.command_family`: the command
with its numeric values taken out, so a sweep's members share what the first measured). A
memory hint is corrected by how far its family's hints were off
(`gpudesk.policy.hint_correction`). Each table's running means and peaks are folded here as a
run reports them.

Pure: no store and no clock. The engine's `JobDemand` (gpudesk.engine.job_demand) reads the
tables from its store, records each run's measurements there, and folds them in here.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gpudesk.core.records import JobRecord
from gpudesk.policy.command_family import family, owner_key
from gpudesk.policy.demand import DEFAULT_SM_PCT, Demand, from_hints, signature
from gpudesk.policy.hint_correction import HintRatios

# The source of a demand taken from the command family's history: placed with the margin of a
# guess (demand.margin_mib), since a sweep over a size changes the memory its members need.
FAMILY_SOURCE = "family history"

# A command's measured demand: (peak memory MiB, mean SM activity %, runs), by owner:signature.
Measured = tuple[float, float, int]


class FamilyRecord(msgspec.Struct, frozen=True):
    memory_mib: float | None  # the largest peak its runs held (None: none measured)
    sm_pct: float | None  # their mean SM activity
    runs: int  # runs whose memory was measured
    run_s: float | None  # the mean run time of its succeeded runs
    finished: int  # succeeded runs timed


def owned(job: JobRecord, of: Callable[[tuple[str, ...], str | None], str] = family) -> str:
    """The key of a job's history: its owner and its command family (`of=signature`: its exact
    command). A member's jobs are given what her own runs measured only: on a shared station
    another user's runs (in a shared folder, where the keys are the same) never set the room
    her jobs are placed for, her hints' correction or her remaining-time estimate."""
    return owner_key(job.owner.uid, of(job.spec.command, job.spec.workdir))


class DemandHistory:
    """The measured-demand history by command and by family, the hints' ratios, and the demand
    they give each job."""

    def __init__(
        self,
        history: dict[str, Measured],
        families: dict[str, FamilyRecord],
        hint_ratios: HintRatios,
    ) -> None:
        self.history = history  # owner:signature -> measured (MiB, SM %, runs)
        self.families = families  # owner:family -> what its runs measured
        self.hint_ratios = hint_ratios

    @property
    def known(self) -> bool:
        """Whether any earlier run measured anything a queued job could be given."""
        return bool(self.history) or any(f.memory_mib for f in self.families.values())

    def of(self, job: JobRecord) -> Demand:
        """What a job is assumed to need: raised after an OOM, else its hints completed by what
        earlier runs of the same command, else of its family, measured, else defaults."""
        if job.demand:
            return Demand(
                float(job.demand["memory_mib"]),
                float(job.demand["sm_pct"]),
                str(job.demand.get("source", "after OOM")),
                bool(job.demand.get("exclusive", True)),
            )
        known = self.history.get(owned(job, signature))
        history = Demand(known[0], known[1], "history") if known else None
        if history is None:
            kin = self.families.get(owned(job))
            if kin is not None and kin.memory_mib:
                sm = kin.sm_pct if kin.sm_pct is not None else DEFAULT_SM_PCT
                history = Demand(kin.memory_mib, sm, FAMILY_SOURCE, sm_assumed=kin.sm_pct is None)
        demand = from_hints(job.spec.memory_gb, job.spec.sm_pct, history)
        # only a memory hint is corrected (an SM hint alone makes the source "hint" too)
        return self.hint_ratios.corrected(owned(job), demand) if job.spec.memory_gb else demand

    def corrects(self, job: JobRecord) -> bool:
        """Whether the job's memory hint is corrected by its family (`of`)."""
        if not self.hint_ratios.ratios or not job.spec.memory_gb:
            return False  # (a long queue, before any run measured a hint, costs nothing)
        return self.hint_ratios.factor(owned(job)) is not None

    def typical_run_s(self, job: JobRecord) -> float | None:
        """The mean run time of a (queued) job's family's succeeded runs (None: none)."""
        kin = self.families.get(owned(job))
        return kin.run_s if kin is not None and kin.finished else None

    def fold_family(self, key: str, memory: float, sm: float, new_run: bool = True) -> None:
        """A run of family `key` measured `memory` (its peak) and `sm`: the family's peak is the
        largest, its SM activity the mean over its runs (`new_run`: a run not counted yet; else
        only its peak is raised)."""
        old = self.families.get(key) or FamilyRecord(None, None, 0, None, 0)
        runs = old.runs + 1 if new_run else old.runs
        mean = (
            ((old.sm_pct or 0.0) * old.runs + sm) / runs
            if new_run
            else (old.sm_pct if old.sm_pct is not None else sm)
        )
        peak = max(old.memory_mib or 0.0, memory)
        self.families[key] = FamilyRecord(peak, mean, runs, old.run_s, old.finished)

    def fold_run(self, key: str, run_s: float) -> None:
        """A succeeded run of family `key` took `run_s`: into the family's mean run time."""
        old = self.families.get(key) or FamilyRecord(None, None, 0, None, 0)
        mean = ((old.run_s or 0.0) * old.finished + run_s) / (old.finished + 1)
        self.families[key] = FamilyRecord(
            old.memory_mib, old.sm_pct, old.runs, mean, old.finished + 1
        )

    def fold_command(self, key: str, memory: float, sm: float) -> None:
        """A succeeded run of command `key` (owner:signature) measured `memory` and `sm`: its
        peak is the largest, its SM activity the mean over its runs."""
        old = self.history.get(key)
        runs = old[2] if old else 0
        peak = max(old[0], memory) if old else memory
        mean = (old[1] * runs + sm) / (runs + 1) if old else sm
        self.history[key] = (peak, mean, runs + 1)
