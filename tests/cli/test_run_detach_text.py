"""What a detached run says (gpudesk.cli.run_detach.detached_text): on a SIMULATED station of
the profile's own, that the station is left running and how it is stopped; on the user's own
engine, nothing of the kind (that engine is hers, and stays)."""

from __future__ import annotations

from gpudesk.cli.run_detach import Detached, detached_text

RUN = Detached("sweep@20261206-1400.42.0123abcd", [7, 8, 9])
ATTACH = "gpudesk run sweep.toml --attach"


def test_a_detached_run_on_its_own_simulated_station_says_how_that_station_is_stopped() -> None:
    prefix = "GPUDESK_HOME=/home/a/.local/state/gpudesk/simulated/dgx-station-a100 "
    text = detached_text(RUN, ATTACH, prefix)
    assert text.splitlines()[-1] == (
        f"  its station:  left running; {ATTACH} stops it at the end, or "
        f"{prefix}gpudesk engine stop"
    )
    # a profile read from a pipe cannot be followed: the stop alone
    piped = detached_text(RUN, None, prefix)
    assert piped.splitlines()[-1] == f"  its station:  left running; {prefix}gpudesk engine stop"


def test_a_detached_run_on_the_users_engine_says_nothing_of_stopping_it() -> None:
    text = detached_text(RUN, ATTACH, "")
    assert "its station" not in text and "engine stop" not in text
    assert text.splitlines()[-1] == f"  its report:   {ATTACH}  (follows it to its end)"


def test_a_detached_run_with_prepasses_lists_them_and_where_their_cost_is_recorded() -> None:
    run = Detached("sel@20261206-1400.42.0123abcd", [5, 6, 7], [3, 4])
    text = detached_text(run, ATTACH, "")
    said = " ".join(text.split())
    assert (
        "2 pre-pass job(s): 3-4, then 3 job(s): 5-7 (a job on a selection starts once its "
        "pre-pass has succeeded)"
    ) in said, text
    assert text.splitlines()[-1] == (
        "  pre-pass cost: recorded in the selection cache by its --attach, or by `gpudesk "
        "select show KEY`"
    )
    # from a pipe: no --attach, so `select show` alone records it
    piped = detached_text(run, None, "")
    assert piped.splitlines()[-1] == (
        "  pre-pass cost: recorded in the selection cache by `gpudesk select show KEY`"
    ), piped
    # no pre-pass: no word of them
    assert "pre-pass" not in detached_text(RUN, ATTACH, "")
