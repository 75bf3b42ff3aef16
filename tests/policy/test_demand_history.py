"""What earlier runs measured, as the demand it gives a job (gpudesk.policy.demand_history),
without a store: the command's own history first, then its family's, else the hints and the
defaults; each table folded as the runs report. The engine's JobDemand keeps the same tables in
its store (tests/engine/test_owner_history.py checks both agree across a restart)."""

from __future__ import annotations

import pytest

from gpudesk.core.identity import Identity
from gpudesk.core.jobs import JobSpec
from gpudesk.core.records import JobRecord
from gpudesk.policy.demand import signature
from gpudesk.policy.demand_history import FAMILY_SOURCE, DemandHistory, owned
from gpudesk.policy.hint_correction import HintRatios

ADA = Identity.of(5001, 5001, ())


def job(job_id: int, lr: str) -> JobRecord:
    spec = JobSpec(name=lr, command=("python", "train.py", "--lr", lr), workdir="/srv/p")
    return JobRecord.queued(job_id, spec, 0.0, owner=ADA)


def test_the_command_then_its_family_then_the_defaults() -> None:
    first, sibling = job(1, "0.1"), job(2, "0.2")
    history = DemandHistory({}, {}, HintRatios())
    assert not history.known
    assert history.of(first).source == "default"
    history.fold_family(owned(first), 6000.0, 30.0)
    history.fold_run(owned(first), 300.0)
    assert history.known
    assert (history.of(sibling).source, history.of(sibling).memory_mib) == (FAMILY_SOURCE, 6000.0)
    assert history.typical_run_s(sibling) == pytest.approx(300.0)
    history.fold_command(owned(first, signature), 5000.0, 20.0)
    assert (history.of(first).source, history.of(first).memory_mib) == ("history", 5000.0)
    assert history.of(sibling).source == FAMILY_SOURCE  # another command of the family


def test_the_folds_keep_the_largest_peak_and_the_mean() -> None:
    key = owned(job(1, "0.1"))
    history = DemandHistory({}, {}, HintRatios())
    history.fold_family(key, 6000.0, 30.0)
    history.fold_family(key, 4000.0, 50.0)
    history.fold_family(key, 7000.0, 90.0, new_run=False)  # the same run, its peak raised
    family = history.families[key]
    assert (family.memory_mib, family.sm_pct, family.runs) == (7000.0, 40.0, 2)
    history.fold_run(key, 100.0)
    history.fold_run(key, 300.0)
    assert (history.families[key].run_s, history.families[key].finished) == (200.0, 2)
    history.fold_command("k", 100.0, 10.0)
    history.fold_command("k", 50.0, 30.0)
    assert history.history["k"] == (100.0, 20.0, 2)


def test_a_reason_says_when_the_sm_share_is_an_assumption() -> None:
    """A job with a memory hint and no SM hint is placed for DEFAULT_SM_PCT, which its reasons
    say is assumed (a user reading "it asks for 60% SM" never said 60 %); a hinted or measured
    share is stated plainly."""
    from gpudesk.policy.demand import DEFAULT_SM_PCT, from_hints

    assumed = from_hints(10.0, None)
    assert (assumed.source, assumed.sm_pct, assumed.sm_assumed) == ("hint", DEFAULT_SM_PCT, True)
    assert assumed.sm_text == f"{DEFAULT_SM_PCT:.0f}% SM (assumed: no SM hint or measure)"
    assert from_hints(None, None).sm_assumed
    assert not from_hints(10.0, 30.0).sm_assumed and from_hints(10.0, 30.0).sm_text == "30% SM"
    assert not from_hints(None, 25.0).sm_assumed

    ran, sibling = job(1, "0.1"), job(2, "0.2")
    history = DemandHistory({}, {}, HintRatios())
    history.fold_family(owned(ran), 6000.0, 30.0)  # its family's runs measured 30 %
    assert history.of(sibling).sm_text == "30% SM"
