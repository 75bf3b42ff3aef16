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
from dataclasses import dataclass, replace

from gpudesk.units import MIB_PER_GB

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


@dataclass(frozen=True)
class Demand:
    memory_mib: float
    sm_pct: float
    source: str  # "hint", "history", "default", "after OOM"
    exclusive: bool = False  # must run alone (after an OOM, or asked for)
    membw_pct: float | None = None  # DRAM bandwidth share alone, where known

    @property
    def heavy(self) -> bool:
        return self.sm_pct >= HEAVY_SM_PCT

    def after_oom(
        self, observed_mib: float | None = None, usable_mib: float | None = None
    ) -> Demand:
        """Raised for the next attempt: more memory than it died with, and a GPU to itself.
        Capped at `usable_mib` (what the largest GPU offers a job alone): a job that died
        sharing gets a whole GPU, which is all a retry can give it. Only a job that died
        holding all of that already is beyond every GPU, and is then a clear failure."""
        memory = self.memory_mib * OOM_GROWTH
        if observed_mib is not None:
            memory = max(memory, observed_mib * OOM_OBSERVED_GROWTH)
        if usable_mib is not None and (observed_mib is None or observed_mib < usable_mib):
            memory = min(memory, usable_mib)
        return replace(self, memory_mib=memory, source="after OOM", exclusive=True)

    def to_dict(self) -> dict[str, object]:
        return {
            "memory_mib": round(self.memory_mib),
            "sm_pct": round(self.sm_pct, 1),
            "source": self.source,
            "exclusive": self.exclusive,
        }


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
    return Demand(memory, sm, source)


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


@functools.lru_cache(maxsize=4096)  # asked for each queued job on every placement pass
def signature(command: tuple[str, ...], workdir: str | None) -> str:
    """Identifies "the same job" across runs: its command and working directory."""
    text = json.dumps([list(command), workdir or ""])
    return hashlib.sha256(text.encode()).hexdigest()[:16]
