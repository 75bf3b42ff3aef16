"""A paired two-sided t-test at 95 %: is a preset's quality different from random's at the same
fraction, run for run (same split, same seed)?

With differences d_1 .. d_n (preset minus random), t = mean(d) / (sd(d) / sqrt(n)) with n - 1
degrees of freedom: Student's paired t-test (Student, "The probable error of a mean",
Biometrika 6, 1908). The difference is significant when |t| exceeds the
two-sided 95 % critical value, the 0.975 quantile of Student's t, read from the table below
(NIST/SEMATECH e-Handbook, section 1.3.6.7.2, "Critical values of the Student's t
distribution", the 0.975 column; tests/cli/test_compare_report.py checks it against scipy).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# degrees of freedom -> the 0.975 quantile of Student's t (NIST/SEMATECH 1.3.6.7.2)
T_975: dict[int, float] = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
    40: 2.021,
    50: 2.009,
    60: 2.000,
    80: 1.990,
    100: 1.984,
}

BETTER = "better than random"
WORSE = "WORSE than random"
SAME = "no different from random"


def t_critical(df: int) -> float:
    """The two-sided 95 % critical value for `df` degrees of freedom. Between the table's
    rows it takes the row below (fewer degrees of freedom: a larger value, so a difference is
    never called significant that the exact value would not call so)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return T_975[max(row for row in T_975 if row <= df)]


@dataclass(frozen=True)
class PairedTest:
    """A preset against random at the same fraction, over the runs both have."""

    baseline: str  # e.g. random-25
    pairs: int
    mean_diff: float | None  # preset minus random, in the metric's own units
    sd_diff: float | None
    t: float | None  # None: fewer than 2 pairs; +-inf: every difference the same, not 0
    t_critical: float | None
    verdict: str


def paired_test(
    baseline: str, differences: Sequence[float], higher_is_better: bool = True
) -> PairedTest:
    """The verdict on `differences` (preset minus random, run by run)."""
    n = len(differences)
    if n == 0:
        return PairedTest(baseline, 0, None, None, None, None, f"no runs paired with {baseline}")
    mean = statistics.fmean(differences)
    if n < 2:
        return PairedTest(
            baseline, 1, mean, None, None, None, "one pair: too few to test (run more seeds)"
        )
    sd = statistics.stdev(differences)
    critical = t_critical(n - 1)
    if sd == 0.0:
        t = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    else:
        t = mean / (sd / math.sqrt(n))
    if abs(t) <= critical:
        return PairedTest(baseline, n, mean, sd, t, critical, SAME)
    verdict = BETTER if (t > 0) == higher_is_better else WORSE
    return PairedTest(baseline, n, mean, sd, t, critical, verdict)
