"""`gpudesk engine set KEY=VALUE`: station settings changed on the running engine, kept for the
next one, and `engine start --slots` changing only what it names."""

from __future__ import annotations

from conftest import EngineHandle, Run

from gpudesk.api.models import StationInfo
from gpudesk.paths import Home


def station(home: Home) -> StationInfo:
    return EngineHandle(home).api.status().station


def test_engine_set_changes_settings_and_says_what_changed(engine: EngineHandle, gpudesk: Run):
    code, out, err = gpudesk("engine", "set", "policy=fifo", "grid_intensity=FR", "slots=3")
    assert code == 0, err
    assert "policy auto → fifo" in out
    assert "grid_intensity 475 → FR" in out
    now = station(engine.home)
    assert (now.policy, now.grid_region, now.slots) == ("fifo", "FR", 3)

    code, out, _ = gpudesk("engine", "set", "policy=fifo")
    assert (code, out.strip()) == (0, "station: nothing to change (it runs these settings already)")

    code, out, _ = gpudesk("engine", "set", "slots=")  # empty: back to the default
    assert code == 0 and "slots 3 → default" in out
    assert station(engine.home).slots is None


def test_engine_set_refuses_bad_input_in_one_line_and_changes_nothing(
    engine: EngineHandle, gpudesk: Run
):
    for args, said in (
        (("policy=fifo", "bogus=1"), "station.bogus: unknown key"),
        (("policy",), "expected KEY=VALUE"),
        (("policy=fifo", "grid_intensity=atlantis"), "not in gpudesk's grid table"),
        (("slots=many",), "station.slots"),
    ):
        code, out, err = gpudesk("engine", "set", *args)
        assert code == 2, (args, out, err)
        assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert station(engine.home).policy == "auto"


def test_engine_start_with_options_keeps_the_other_saved_settings(
    home: Home, engine: EngineHandle, gpudesk: Run
):
    assert gpudesk("engine", "set", "grid_intensity=DE", "policy=fifo")[0] == 0
    assert gpudesk("engine", "stop")[0] == 0
    code, _, err = gpudesk("engine", "start", "--slots", "3")
    assert code == 0, err
    now = station(home)
    assert (now.slots, now.grid_region, now.policy) == (3, "DE", "fifo")


def test_a_per_user_limit_is_set_and_echoed_none_as_its_docs_and_status_say(
    engine: EngineHandle, gpudesk: Run
):
    """No limit is `none` everywhere: the word taken, the echo and the status (null) agree."""
    code, out, err = gpudesk("engine", "set", "max_queued_per_user=100")
    assert (code, out.strip()) == (0, "station: max_queued_per_user none → 100"), err
    assert station(engine.home).max_queued_per_user == 100
    code, out, err = gpudesk("engine", "set", "max_queued_per_user=none")
    assert (code, out.strip()) == (0, "station: max_queued_per_user 100 → none"), err
    assert station(engine.home).max_queued_per_user is None
    assert gpudesk("engine", "set", "max_running_gpus_per_user=2")[0] == 0
    code, out, err = gpudesk("engine", "set", "max_running_gpus_per_user=0")
    assert (code, out.strip()) == (0, "station: max_running_gpus_per_user 2 → none"), err
    code, _, err = gpudesk("engine", "set", "max_queued_per_user=lots")
    assert code == 2 and 'from 0 (or "none": no limit)' in err, err
