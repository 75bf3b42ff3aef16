"""Command families (the members of a sweep are one) and remaining time (from progress, else
the family's history, else unknown): the pure rules, and the words `show` and the desk give them."""

from __future__ import annotations

import pytest

from gpudesk.api.models import RemainingView
from gpudesk.policy.command_family import family, family_words
from gpudesk.policy.remaining import RATE_WINDOW_S, RecentProgress, estimate
from gpudesk.render import remaining_text


def test_numeric_values_are_hyper_parameters_the_rest_is_the_family() -> None:
    assert family_words(("python", "train.py", "--lr", "0.1", "--epochs=30", "64")) == (
        "python",
        "train.py",
        "--lr",
        "#",
        "--epochs=#",
        "#",
    )
    # paths, subcommands and word values stay: another model is another family
    assert family_words(("python", "run.py", "fit", "--model", "vit", "--out", "runs/3")) == (
        "python",
        "run.py",
        "fit",
        "--model",
        "vit",
        "--out",
        "runs/3",
    )
    assert family_words(("./sim", "--mode", "nan", "-x", "1e-4")) == (
        "./sim",
        "--mode",
        "nan",  # a word, though float() reads it
        "-x",
        "#",
    )
    assert family_words(("7",)) == ("7",)  # the program is never generalised


def test_a_sweep_is_one_family_and_its_workdir_or_words_part_it() -> None:
    base = ("python", "train.py", "--lr")
    assert family((*base, "0.1"), "/w") == family((*base, "0.01"), "/w")
    assert family((*base, "0.1"), "/w") != family((*base, "0.1"), "/other")
    assert family(("python", "a.py", "--model", "vit"), None) != family(
        ("python", "a.py", "--model", "resnet"), None
    )


def test_the_rate_is_measured_over_the_recent_window() -> None:
    recent = RecentProgress()
    for second in range(0, 200, 10):
        # 1 step/s for the first 100 s, then 3 steps/s: the rate follows the change
        done = second if second <= 100 else 100 + 3 * (second - 100)
        recent.add(float(second), float(done), 1000.0)
    assert recent.rate_per_s == pytest.approx(3.0)
    assert recent.points[-1][0] - recent.points[0][0] <= RATE_WINDOW_S + 10
    # a job printing less often than the window still has a rate, over its last two lines
    sparse = RecentProgress()
    sparse.add(0.0, 0.0, 10.0)
    sparse.add(300.0, 3.0, None)
    assert sparse.rate_per_s == pytest.approx(0.01) and sparse.total == 10.0


def test_a_restart_measures_the_rate_from_the_latest_line_on() -> None:
    recent = RecentProgress()
    recent.add(0.0, 0.0, 100.0)
    recent.add(10.0, 50.0, 100.0)
    recent.restart()  # a co-tenant arrived
    assert recent.rate_per_s is None
    recent.add(20.0, 60.0, 100.0)
    assert recent.rate_per_s == pytest.approx(1.0)
    # counting from 0 again (a second run in the same log) starts the window again
    recent.add(21.0, 1.0, 100.0)
    assert recent.rate_per_s is None and recent.done == 1.0


def test_progress_first_then_history_then_unknown() -> None:
    recent = RecentProgress()
    recent.add(0.0, 400.0, 1000.0)
    recent.add(30.0, 480.0, 1000.0)
    from_progress = estimate(recent, typical_s=50.0, elapsed_s=10.0)
    assert from_progress.source == "progress"
    assert from_progress.seconds == pytest.approx(520 / (80 / 30))
    # read 5 s ago: it has worked on since
    later = estimate(recent, typical_s=50.0, elapsed_s=15.0, now=35.0)
    assert later.seconds == pytest.approx(520 / (80 / 30) - 5)
    no_total = RecentProgress()
    no_total.add(0.0, 1.0, None)
    no_total.add(5.0, 2.0, None)
    from_history = estimate(no_total, typical_s=600.0, elapsed_s=100.0)
    assert (from_history.source, from_history.seconds) == ("history", 500.0)
    assert estimate(None, None, 100.0).source == "unknown"
    past = estimate(None, typical_s=60.0, elapsed_s=100.0)  # ran past its family's typical
    assert (past.source, past.seconds, past.typical_s) == ("unknown", None, 60.0)
    finished = RecentProgress()
    finished.add(0.0, 1000.0, 1000.0)
    assert estimate(finished, None, 5.0).seconds == 0.0


def test_the_engines_own_figure_is_kept_beside_the_progress() -> None:
    """What a rule acting for another member believes (`measured_s`): the family's figure,
    whether or not the job prints progress; never its progress."""
    recent = RecentProgress()
    recent.add(0.0, 990.0, 1000.0)
    recent.add(30.0, 999.0, 1000.0)  # it says it is nearly done
    said = estimate(recent, typical_s=600.0, elapsed_s=100.0)
    assert said.source == "progress" and said.seconds is not None and said.seconds < 5
    assert said.measured_s == 500.0
    assert estimate(recent, typical_s=None, elapsed_s=100.0).measured_s is None
    assert estimate(None, typical_s=600.0, elapsed_s=100.0).measured_s == 500.0
    assert estimate(None, typical_s=60.0, elapsed_s=100.0).measured_s is None


@pytest.mark.parametrize(
    ("remaining", "words"),
    [
        (
            RemainingView(seconds=None, source="unknown", done=130.0, total=1000.0),
            "unknown (its progress 130/1000, its rate not measured yet, and no finished run",
        ),
        (
            RemainingView(seconds=None, source="unknown", done=5.0),
            "unknown (its progress lines give no TOTAL, and no finished run of its command "
            "family by its owner)",
        ),
        (
            RemainingView(seconds=None, source="unknown", typical_s=60.0, elapsed_s=200.0),
            "unknown (no progress DONE/TOTAL lines; it has run 3 min, past its command "
            "family's 60 s)",
        ),
        (
            RemainingView(seconds=5400.0, source="history", typical_s=7200.0, elapsed_s=1800.0),
            "~1.5 h (from its command family's history: its owner's runs take 2.0 h, it has "
            "run 30 min)",
        ),
    ],
)
def test_the_words_say_why_it_is_unknown(remaining: RemainingView, words: str) -> None:
    assert remaining_text(remaining).startswith(words)


def test_a_far_estimate_is_said_in_days_and_an_absurd_one_in_a_few_words() -> None:
    """A job's progress may promise anything (`progress 5/1e300`): `show` once printed its
    remaining time as a 300-digit count of hours."""
    week = RemainingView(seconds=7 * 86400.0, source="progress", done=1.0, total=8.0)
    assert remaining_text(week).startswith("~7 days (from its progress: 1/8")
    absurd = RemainingView(seconds=5e299, source="progress", done=5.0, total=1e300)
    assert remaining_text(absurd) == "over 100 years (from its progress: 5/1e+300)"
