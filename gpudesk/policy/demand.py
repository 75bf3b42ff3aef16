"""What a job is expected to need from a GPU: memory and SM activity.

From the job's own hints (`memory_gb`, `sm_pct`), else what earlier runs of the same command
measured (peaks the store remembers), else a conservative default. While a job runs, its
measured peak takes over from the estimate (`reservation`). An out-of-memory death raises the
estimate and asks for an exclusive GPU on the next attempt.
"""

from __future__ import annotations

import functools
import hashlib
import json

import msgspec

from gpudesk.policy.command_family import KEYS_CACHED
from gpudesk.units import MIB_PER_GB, MIB_PER_GIB

DEFAULT_MEMORY_MIB = 8 * MIB_PER_GB  # a job that says nothing: a fifth of an A100 40GB
DEFAULT_SM_PCT = 60.0  # ... and most of its SMs, so it is collocated cautiously
HEAVY_SM_PCT = 80.0  # a job at or above this saturates a GPU by itself
OOM_GROWTH = 1.5  # after an OOM the estimate grows by at least this factor
OOM_OBSERVED_GROWTH = 1.25  # ... and to this much over what it held when it died
PEAK_SETTLED_S = 60.0  # a running job whose memory has not grown for this long is at its peak
PEAK_HEADROOM = 1.1  # ... and is counted as holding its measured peak plus this much
MARGIN_MIB = 2048.0  # an estimated need must fit with this much to spare (CARMA's margin)
# A need measured by earlier runs of the same command fits with 3 % to spare (at least 256 MiB),
# and a running job whose peak was known holds that much over it. The same command's peak
# recurs almost exactly: the seed's DLRM and ResNet152 peaks measured alone (29.14 + 8.47 GB)
# add up to what they held together (37.62 GB) within 0.1 %; the rest is the caching
# allocator's rounding. Estimators miss by GiBs (the CARMA trace's GPUMemNet guesses are off by
# several GiB for most jobs), hence CARMA's 2 GiB for a guess. Assumption: 3 %.
MEASURED_MARGIN_SHARE = 0.03
MEASURED_MARGIN_MIN_MIB = 256.0
# A hint at or above this share of the largest GPU is taken as "unknown" (`hint_unknown`), as is
# any need above what a GPU offers a job alone. Not a measured figure: the memory estimators clamp
# their guesses at the GPU's size (the CARMA trace's Horus, FakeTensor and GPUMemNet guesses of
# 40,000 MB on a 40 GB A100 belong to jobs that peak at 1.5 to 28.6 GB: 4 to 71 %), and issue 39
# measured the rule at 90 %. On that trace any share from 80 % (above its largest other guess,
# 32,000 MB) to 98 % places the same jobs. Assumption: 90 %. SIMULATED on that trace it helps
# under the published model and is mixed where sharing costs more (docs/benchmarks.md, issue 39).
UNKNOWN_HINT_SHARE = 0.9
# A job whose figure is unknown is admitted as one that gave none (the default), and may then use
# all the room it was given: alone, the GPU; beside others, what they left free (its MPS limit).
UNKNOWN_ADMIT_MIB = DEFAULT_MEMORY_MIB


class Demand(msgspec.Struct, frozen=True):
    memory_mib: float
    sm_pct: float
    source: str  # "hint", "history", "default", "after OOM"
    exclusive: bool = False  # must run alone (after an OOM, or asked for)
    membw_pct: float | None = None  # DRAM bandwidth share alone, where known
    # Why its memory figure is not used ("" where it is): a hint above what a GPU offers
    # (`hint_unknown`). Such a job is placed for the room it gets, not for the figure.
    unknown: str = ""
    # Its SM share is DEFAULT_SM_PCT, an assumption: neither its hints nor any run measured one
    # (a memory hint alone makes `source` "hint"; what it is told says which figure is whose)
    sm_assumed: bool = False

    @property
    def sm_text(self) -> str:
        """Its SM share as a reason gives it: "60% SM (assumed: no SM hint or measure)"."""
        return f"{self.sm_pct:.0f}% SM" + (
            " (assumed: no SM hint or measure)" if self.sm_assumed else ""
        )

    @property
    def heavy(self) -> bool:
        return self.sm_pct >= HEAVY_SM_PCT

    def after_oom(
        self,
        observed_mib: float | None = None,
        usable_mib: float | None = None,
        had_whole: bool = False,
    ) -> Demand:
        """Raised for the next attempt: more memory than it died with, and a GPU to itself.
        Capped at `usable_mib` (what the largest GPU offers a job alone): a job that died
        sharing, or alone under an MPS memory limit, gets a whole GPU, which is all a retry can
        give it. Only a job that died alone on a whole GPU of the largest size with all its
        memory (`had_whole`: exclusive, no limit) has a need measured beyond every GPU
        (`beyond_every_gpu`), and is then a clear failure."""
        memory = self.memory_mib * OOM_GROWTH
        if observed_mib is not None:
            memory = max(memory, observed_mib * OOM_OBSERVED_GROWTH)
        if usable_mib is not None:
            # alone with all of it, the need is measured: more than it had
            memory = max(memory, usable_mib * OOM_GROWTH) if had_whole else min(memory, usable_mib)
        return msgspec.structs.replace(
            self, memory_mib=memory, source="after OOM", exclusive=True, unknown=""
        )

    @property
    def admit_mib(self) -> float:
        """The memory a placement must find for it: its figure, or `UNKNOWN_ADMIT_MIB` where
        that is unknown."""
        return min(self.memory_mib, UNKNOWN_ADMIT_MIB) if self.unknown else self.memory_mib

    def to_dict(self) -> dict[str, object]:
        # `unknown` is told in the placement's reason, not here: this is the wire's DemandView
        return {
            "memory_mib": round(self.memory_mib),
            "sm_pct": round(self.sm_pct, 1),
            "source": self.source,
            "exclusive": self.exclusive,
        }


def beyond_every_gpu(demand: Demand, usable_mib: float | None) -> bool:
    """A need measured beyond what any GPU here offers a job alone: raised after an OOM past
    `usable_mib` (`Demand.after_oom`). The one memory figure that fails a job: a hint never
    does (`hint_unknown`)."""
    return (
        usable_mib is not None and demand.source == "after OOM" and demand.memory_mib > usable_mib
    )


def hint_unknown(memory_mib: float, source: str, largest_mib: float, usable_mib: float) -> str:
    """Why a job's memory figure is taken as unknown, or "": above what the largest GPU offers
    a job alone (`usable_mib`, its memory less the reserve), or, for a hint, at or above
    `UNKNOWN_HINT_SHARE` of it (`largest_mib`): such a figure is a guess clamped at the GPU's
    size more often than a need (see the constant). A figure raised after an OOM is measured,
    never unknown (`beyond_every_gpu`); a peak measured before (history) is unknown only above
    what a GPU offers alone."""
    if source == "after OOM" or largest_mib <= 0:
        return ""
    if memory_mib > usable_mib:
        return (
            f"its {source} of {memory_mib / MIB_PER_GIB:.1f} GiB is above what the largest GPU "
            f"here offers a job alone ({usable_mib / MIB_PER_GIB:.1f} GiB)"
        )
    if source == "hint" and memory_mib >= UNKNOWN_HINT_SHARE * largest_mib:
        return (
            f"its hint of {memory_mib / MIB_PER_GIB:.1f} GiB is {memory_mib / largest_mib:.0%} of "
            f"the largest GPU here (at or above {UNKNOWN_HINT_SHARE:.0%}, a guess clamped at the "
            "GPU's size more often than a need)"
        )
    return ""


def margin_mib(demand: Demand) -> float:
    """What a job's need must fit with: little for a peak measured before, CARMA's 2 GiB for a
    guess (hints, defaults; after an OOM the job runs alone anyway)."""
    if demand.source == "history":
        return max(MEASURED_MARGIN_MIN_MIB, demand.memory_mib * MEASURED_MARGIN_SHARE)
    return MARGIN_MIB


def reservation(
    estimate_mib: float, peak_mib: float | None, settled_s: float | None, known: bool = False
) -> float:
    """The memory a running job is counted as holding on its GPU: its estimate until its
    measured memory has stopped growing for `PEAK_SETTLED_S`, then its measured peak plus
    headroom (10 %, or 3 % where earlier runs of the command already measured its peak,
    `known`). This is how an estimate is corrected while the job runs, both ways: an
    overestimate frees room for others, an underestimate stops others being packed in."""
    if peak_mib is None or settled_s is None or settled_s < PEAK_SETTLED_S:
        return estimate_mib
    return peak_mib * (1.0 + MEASURED_MARGIN_SHARE if known else PEAK_HEADROOM)


def from_hints(
    memory_gb: float | None, sm_pct: float | None, history: Demand | None = None
) -> Demand:
    """A job's demand from its hints, completed by history, else defaults."""
    if history is not None and memory_gb is None and sm_pct is None:
        return history
    memory, sm = hinted(memory_gb, sm_pct, history)
    source = "hint" if memory_gb is not None or sm_pct is not None else "default"
    assumed = sm_pct is None and (history is None or history.sm_assumed)
    return Demand(memory, sm, source, sm_assumed=assumed)


def hinted(
    memory_gb: float | None, sm_pct: float | None, history: Demand | None = None
) -> tuple[float, float]:
    """(memory MiB, SM %) from the hints, gaps filled from history, else the defaults. Without
    building a Demand: a placement pass asks this for every queued job."""
    memory = (
        memory_gb * MIB_PER_GB
        if memory_gb is not None
        else (history.memory_mib if history else DEFAULT_MEMORY_MIB)
    )
    sm = sm_pct if sm_pct is not None else (history.sm_pct if history else DEFAULT_SM_PCT)
    return memory, sm


@functools.lru_cache(maxsize=KEYS_CACHED)  # asked for each queued job on every pass
def signature(command: tuple[str, ...], workdir: str | None) -> str:
    """Identifies "the same job" across runs: its command and working directory."""
    text = json.dumps([list(command), workdir or ""])
    return hashlib.sha256(text.encode()).hexdigest()[:16]
