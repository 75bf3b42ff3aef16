"""A memory hint corrected by how far its command family's hints were off (issue 39, item 2).

A memory hint is a guess: the user's, or an estimator's (Horus, FakeTensor, GPUMemNet), and the
estimators miss by a factor that is much the same for one model (on the CARMA trace's jobs,
Horus's guesses for a ResNet-50 sweep are 2.0-2.2 x its measured peaks; FakeTensor's for
ResNet-34 0.09-0.14 x). Once a member of a family has run long enough for its memory to settle
(`demand.PEAK_SETTLED_S`), its ratio peak ÷ hint is kept for its family and hint; where members
of different sizes have settled and their ratios agree, the family's later members' hints are
scaled by the largest of them, so that the size whose hint was the least generous sets it.

Only hints that were too large are corrected (every ratio below 1): such a hint keeps room from
other jobs until the job has run long enough for its own measured peak to replace it. A hint
too small needs no correction in advance: the job is placed under an MPS memory limit of the
room it was given, its own measured peak replaces the hint within its first minute, and an
out-of-memory death reruns it with a raised figure. Raising such hints by their family's ratio
was measured in the simulator and not kept: on the CARMA trace with FakeTensor's guesses
(4-14 % of the peaks) it made auto 3-7 % slower in four of its five settings and prevented no
out-of-memory death (docs/benchmarks.md).

Only a hint is corrected: a figure the same command measured (history), one raised after an
out-of-memory death, or a default is used as it is. The corrected figure is still a guess: it
is placed with a guess's margin (`demand.margin_mib`), and an out-of-memory death raises it as
any. A corrected figure is not taken as "unknown" for being a large share of the GPU
(`demand.hint_unknown`'s clamp rule is about raw hints).
"""

from __future__ import annotations

import msgspec

from gpudesk.policy.demand import Demand

CORRECTED_SOURCE = "hint, corrected by its family"
# A family's ratio is used once members with different hints (different sizes: a batch, a
# model width) have settled and their ratios agree within CONSISTENT_SPREAD (largest ÷
# smallest): the estimator's miss is then seen to be a factor of the family, not of one size.
# Two runs of one size agreeing say nothing about the next size: the CARMA trace's GPUMemNet
# guesses for Inception miss by 0.65 x at one size and 1.11 x at another, and scaling the second
# by the first's ratio squeezes it into room it does not fit (an out-of-memory death, measured
# in the simulator). Assumption, not measured: a spread of 1.5.
CONSISTENT_SPREAD = 1.5
DISTINCT_HINTS = 2


class HintRatios(msgspec.Struct):
    """Per command family and distinct hint (MiB, rounded), the largest measured-peak ÷ hint
    ratio of its settled members: what the engine's store keeps (family_hint_ratios)."""

    ratios: dict[str, dict[int, float]] = msgspec.field(default_factory=dict)

    def learn(self, family: str, hint_mib: float, peak_mib: float) -> float:
        """A member whose memory settled at `peak_mib` had been hinted at `hint_mib`; its
        ratio (0 where nothing was learned). The same run told again changes nothing: a hint
        keeps its largest ratio (the simulator tells each settled run on every event)."""
        if hint_mib <= 0.0 or peak_mib <= 0.0:
            return 0.0
        self.note(family, round(hint_mib), peak_mib / hint_mib)
        return peak_mib / hint_mib

    def note(self, family: str, hint_mib: int, ratio: float) -> None:
        """A ratio seen for a hint of the family (from a member, or the store)."""
        sizes = self.ratios.setdefault(family, {})
        sizes[hint_mib] = max(ratio, sizes.get(hint_mib, 0.0))

    def factor(self, family: str) -> float | None:
        """The family's correction: its largest ratio, where members of different sizes have
        settled, their ratios agree and all were below 1 (the hints too large); else None."""
        sizes = self.ratios.get(family)
        if sizes is None or len(sizes) < DISTINCT_HINTS:
            return None
        low, high = min(sizes.values()), max(sizes.values())
        return high if high < 1.0 and high <= CONSISTENT_SPREAD * low else None

    def corrected(self, family: str, demand: Demand) -> Demand:
        """The demand with its hinted memory scaled by the family's `factor` (as it is where
        there is none, or where the figure is not a hint)."""
        factor = self.factor(family) if demand.source == "hint" else None
        if factor is None:
            return demand
        return msgspec.structs.replace(
            demand, memory_mib=demand.memory_mib * factor, source=CORRECTED_SOURCE
        )
