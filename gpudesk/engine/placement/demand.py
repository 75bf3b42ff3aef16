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
PEAK_SETTLED_S = 60.0  # a running job whose memory has not grown for this long is at its peak
PEAK_HEADROOM = 1.1  # ... and is counted as holding its measured peak plus this much


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

    def after_oom(self, observed_mib: float | None = None) -> Demand:
        """Raised for the next attempt: more memory than it died with, and a GPU to itself."""
        memory = self.memory_mib * OOM_GROWTH
        if observed_mib is not None:
            memory = max(memory, observed_mib * 1.25)
        return replace(self, memory_mib=memory, source="after OOM", exclusive=True)

    def to_dict(self) -> dict[str, object]:
        return {
            "memory_mib": round(self.memory_mib),
            "sm_pct": round(self.sm_pct, 1),
            "source": self.source,
            "exclusive": self.exclusive,
        }


def reservation(estimate_mib: float, peak_mib: float | None, settled_s: float | None) -> float:
    """The memory a running job is counted as holding on its GPU: its estimate until its
    measured memory has stopped growing for `PEAK_SETTLED_S`, then its measured peak plus
    headroom. This is how an estimate is corrected while the job runs, both ways: an
    overestimate frees room for others, an underestimate stops others being packed in."""
    if peak_mib is None or settled_s is None or settled_s < PEAK_SETTLED_S:
        return estimate_mib
    return peak_mib * PEAK_HEADROOM


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
