"""One member's jobs cannot pull the interference model every member is placed with: where the
kept observations of a parameter come from more than one owner, the learner hears each owner as
one voice (the median of their means), however many observations each sent
(gpudesk/policy/learner.py `_blend`). A station of one user learns exactly as before."""

from __future__ import annotations

import msgspec
import pytest

from gpudesk.policy.interference import (
    DEFAULT_PARAMS,
    PRIOR_WEIGHT,
    KeptObservation,
    Learner,
    Observation,
    Workload,
    predicted_rate,
)

GPU = "NVIDIA A100-SXM4-40GB"
LIGHT = Workload(0.2, 0.1)


def pair(rate: float) -> Observation:
    """A light job beside another under MPS, below a full GPU: it tells the co-tenant cost
    (1 - rate for one co-tenant)."""
    return Observation("mps", LIGHT, (LIGHT,), rate)


def learned(observations: list[tuple[Observation, int | None]]) -> float:
    learner = Learner()
    learner.observe_all(
        GPU, [KeptObservation(o, float(i), False, who) for i, (o, who) in enumerate(observations)]
    )
    return learner.params(GPU).mps_tenant_cost


def test_one_member_flooding_stalled_progress_does_not_move_the_station_model() -> None:
    # ada's input-bound jobs (or a false progress line) read as a co-tenant cost of 0.5, sixty
    # times; bob's and cy's three each read 0.05. A plain mean would follow ada (~0.45), and the
    # robust rule would then refuse sharing to everyone
    flood = [(pair(0.5), 1001)] * 60 + [(pair(0.95), 1002)] * 3 + [(pair(0.95), 1003)] * 3
    cost = learned(flood)
    assert cost == pytest.approx((0.04 * PRIOR_WEIGHT + 66 * 0.05) / (PRIOR_WEIGHT + 66))
    plain = (0.04 * PRIOR_WEIGHT + 60 * 0.5 + 6 * 0.05) / (PRIOR_WEIGHT + 66)
    assert plain > 0.4 and cost < 0.06


def test_where_members_are_even_in_number_the_prior_breaks_the_tie() -> None:
    # two voices have no middle one: the prior (0.04) breaks the tie, so ada's thirty readings
    # of 0.5 move the model no further than bob's 0.1 (the mean of the two would be 0.3)
    two = [(pair(0.5), 1001)] * 30 + [(pair(0.9), 1002)] * 2
    assert learned(two) == pytest.approx((0.04 * PRIOR_WEIGHT + 32 * 0.1) / (PRIOR_WEIGHT + 32))
    # a member flooding false progress beside one honest member: the honest one stands
    flood = [(pair(0.5), 1001)] * 60 + [(pair(0.95), 1002)] * 3
    assert learned(flood) == pytest.approx((0.04 * PRIOR_WEIGHT + 63 * 0.05) / (PRIOR_WEIGHT + 63))
    # two members who both see a dearer sharing than the prior still teach it: the nearer one
    both = [(pair(0.85), 1001)] * 3 + [(pair(0.83), 1002)] * 3
    assert learned(both) == pytest.approx((0.04 * PRIOR_WEIGHT + 6 * 0.15) / (PRIOR_WEIGHT + 6))
    # four voices: the prior makes a fifth, and the middle one stands
    four = [(pair(1 - c), 1000 + i) for i, c in enumerate((0.06, 0.08, 0.3, 0.5))]
    assert learned(four) == pytest.approx((0.04 * PRIOR_WEIGHT + 4 * 0.08) / (PRIOR_WEIGHT + 4))


def test_one_member_learns_as_before() -> None:
    # one owner, or none (a calibration; the simulator): the plain mean, to the last digit
    alone = [(pair(0.5), 1001)] * 30 + [(pair(0.9), 1001)] * 2
    nobody = [(o, None) for o, _ in alone]
    expected = (0.04 * PRIOR_WEIGHT + 30 * 0.5 + 2 * 0.1) / (PRIOR_WEIGHT + 32)
    assert learned(alone) == learned(nobody) == pytest.approx(expected)
    assert DEFAULT_PARAMS.mps_tenant_cost == 0.04


def test_one_member_cannot_move_how_the_others_observations_are_read() -> None:
    """Observations are read at what the observations alone say (`Learner.observed`), without
    the prior's pull: that point too hears each member as one voice. ada floods the co-tenant
    cost with false readings (0.5); bob's and cy's say 0.05, and their crowded groups (pressure
    1.2) say a contention of 0.1 read at that cost. Read at ada's 0.5 they would say nothing
    (the rate left after such a cost is below the floor) or anything; read where bob and cy
    stand, contention is theirs."""
    truth = DEFAULT_PARAMS.with_values({"mps_tenant_cost": 0.05, "contention": 0.1})
    group = Observation("mps", Workload(0.7, 0.35), (Workload(0.5, 0.25),), 1.0)
    crowded = msgspec.structs.replace(group, rate=predicted_rate(truth, group))
    honest = [(pair(0.95), who) for who in (1002, 1003) for _ in range(3)]
    groups = [(crowded, who) for who in (1002, 1003) for _ in range(4)]
    learner = Learner()
    kept = [(pair(0.5), 1001)] * 60 + honest + groups
    learner.observe_all(
        GPU, [KeptObservation(o, float(i), False, who) for i, (o, who) in enumerate(kept)]
    )
    observed = learner.observed(GPU)
    assert observed.mps_tenant_cost == pytest.approx(0.05)
    assert observed.contention == pytest.approx(0.1)
    fitted = learner.params(GPU)
    assert fitted.contention == pytest.approx(
        (DEFAULT_PARAMS.contention * PRIOR_WEIGHT + 8 * 0.1) / (PRIOR_WEIGHT + 8)
    )
