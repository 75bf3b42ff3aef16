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
