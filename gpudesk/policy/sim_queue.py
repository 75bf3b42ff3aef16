"""The simulator's queue (`SimQueue`): the waiting runs in the engine's order (`queue_key`), their
records, a lookup by job id, and each one's demand as the engine gives it, to every policy: its
hint corrected by its family's settled members (`hint_correction`; CARMA's own rules take the hint
as given), kept, as the engine's scheduler keeps it, only where it is not what the policy derives
from the job's hints itself.

Why it is kept rather than rebuilt: every event runs a scheduling pass, and with a long queue
(thousands of jobs waiting) sorting it, rebuilding the record list and the by-id lookup, and
correcting every job's hint again on each pass made a replay quadratic in the trace's length. Here
a run is put in its place when it joins (a binary search on the keys) and taken out when it
leaves; a demand is corrected when its run joins and again only when its family's correction
changes (checked per family, not per job, before the policy sees the demands). The figures are
the same as those rebuilt from scratch: the same order (each key is unique: the job's id), and
each demand the same function of the run's demand and its family's current factor.

It also keeps its jobs by class (`queue_classes`: their hints and the demand told for them), and
gives the policy its records as a `ClassedQueue` (`classed`), so that a pass over thousands of
waiting jobs visits them by class rather than one by one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import Demand, from_hints
from gpudesk.policy.hint_correction import HintRatios
from gpudesk.policy.queue_classes import ClassedQueue, QueueClasses, job_class
from gpudesk.policy.sim_order import family_of
from gpudesk.policy.sim_preemption import queue_key
from gpudesk.policy.sim_records import SimRun

_UNSEEN = object()  # a family's factor before any of its members' demands were corrected


class SimQueue:
    def __init__(self, ratios: HintRatios) -> None:
        self.ratios = ratios
        self.runs: list[SimRun] = []  # in queue_key order
        self.records: list[JobRecord] = []  # the runs' records, in the same order
        self.by_id: dict[int, SimRun] = {}
        self._keys: list[tuple[int, int]] = []  # the runs' queue_key, for the binary search
        self._demands: dict[int, Demand] = {}  # by job id, corrected by `_factors[family]`
        self._families: dict[str, dict[int, SimRun]] = {}  # queued runs by family, by job id
        self._factors: dict[str, object] = {}  # the factor each family's demands were made with
        self._classes = QueueClasses()  # the runs' order keys by job_class

    def __iter__(self) -> Iterator[SimRun]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def __bool__(self) -> bool:
        return bool(self.runs)

    def add(self, run: SimRun) -> None:
        """The run joins the queue in its place (its demand as it is now)."""
        key = queue_key(run)
        at = bisect_left(self._keys, key)
        self._keys.insert(at, key)
        self.runs.insert(at, run)
        self.records.insert(at, run.record)
        job_id = run.record.id
        self.by_id[job_id] = run
        family = family_of(run)
        self._sync(family)  # its members' demands at the factor the new one's is made with
        self._families.setdefault(family, {})[job_id] = run
        self._correct(family, run)

    def remove(self, run: SimRun) -> None:
        """The run leaves the queue (started, rejected)."""
        at = bisect_left(self._keys, queue_key(run))
        assert self.runs[at] is run, f"job {run.record.id} is not queued"
        del self._keys[at], self.runs[at], self.records[at]
        job_id = run.record.id
        del self.by_id[job_id]
        self._demands.pop(job_id, None)
        del self._families[family_of(run)][job_id]
        self._classes.take(queue_key(run))

    def clear(self) -> None:
        for run in list(self.runs):
            self.remove(run)

    def classed(self) -> ClassedQueue:
        """The queued records in order, with their classes (valid until the queue changes;
        after `demands()`, which brings the classes up to the families' corrections now)."""
        return ClassedQueue(self.records, self._keys, self._classes)

    def demands(self) -> dict[int, Demand]:
        """The queued jobs' demands beyond their hints, under their families' corrections now
        (a copy: the policy's view of the station stays as it was when the queue then
        changes)."""
        for family in self._families:
            self._sync(family)
        return dict(self._demands)

    def _sync(self, family: str) -> None:
        """Correct the family's queued demands again where its factor changed since."""
        factor = self.ratios.factor(family)
        if self._factors.get(family, _UNSEEN) == factor:
            return
        self._factors[family] = factor
        for run in self._families.get(family, {}).values():
            self._correct(family, run)

    def _correct(self, family: str, run: SimRun) -> None:
        """The run's demand as the policy is told it, kept only where it is not what the
        policy derives from the job's hints itself (as the engine's scheduler gives it:
        `_demands_beyond_hints`): a job the policy reads from its hints takes its hot path,
        where a queue of such jobs costs the least, and the figures are equal."""
        demand = self.ratios.corrected(family, run.demand)
        spec = run.record.spec
        if demand == from_hints(spec.memory_gb, spec.sm_pct):
            self._demands.pop(run.record.id, None)
            told = None
        else:
            self._demands[run.record.id] = told = demand
        self._classes.put(queue_key(run), job_class(run.record, told))
