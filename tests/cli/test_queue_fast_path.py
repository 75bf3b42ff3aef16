"""`gpudesk queue` runs before typer is imported when its command line is plain
(gpudesk.cli.fast_path): the fast parser must give the typer command's options exactly, hand
anything else to typer, and print what the typer command prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudesk.cli import fast_path, jobs
from gpudesk.cli.queue_listing import QueueOptions
from tests.conftest import EngineHandle, Run

PLAIN = [
    [],
    ["--all"],
    ["-a", "--json"],
    ["--limit", "3"],
    ["--limit=007"],
    ["--user", "ada", "--state", "queued,held"],
    ["-u", "ada", "-s", "running", "-g", "sweep"],
    ["--group=sweep", "--name", "train-*", "--me"],
    ["--name=a=b"],
    ["--user="],
    ["--json", "--all", "--limit", "20", "--name", "x", "-g", "g", "-s", "failed"],
]
FOR_TYPER = [
    ["--help"],
    ["-h"],
    ["-aj"],  # bundled short flags
    ["--all", "--all"],
    ["--limit"],
    ["--limit", "-1"],
    ["--limit", "0"],  # typer's usage error: at least 1 (it was taken as 1, silently)
    ["--limit", "1_000"],
    ["--limit", "x"],
    ["--limit", " 5"],
    ["--user"],
    ["--user", "-x"],
    ["-g=sweep"],
    ["-gsweep"],
    ["--all=1"],
    ["--"],
    ["extra"],
    ["--bogus"],
    ["--usr", "ada"],
]


def typer_options(args: list[str], monkeypatch: pytest.MonkeyPatch) -> QueueOptions | None:
    """The options the typer command hands on for `gpudesk queue ARGS` (None: it refused)."""
    from gpudesk.cli.main import main

    seen: list[QueueOptions] = []
    monkeypatch.setattr(jobs, "list_queue", seen.append)
    with pytest.raises(SystemExit):
        main(["queue", *args])
    return seen[0] if seen else None


@pytest.fixture(autouse=True)
def _no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDESK_CONFIG", "")
    monkeypatch.delenv("_GPUDESK_COMPLETE", raising=False)


@pytest.mark.parametrize("args", PLAIN, ids=" ".join)
def test_a_plain_command_line_is_read_as_typer_reads_it(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = fast_path.plain_queue_options(args)
    assert fast is not None
    assert fast == typer_options(args, monkeypatch)


@pytest.mark.parametrize("args", FOR_TYPER, ids=" ".join)
def test_anything_else_is_left_to_typer(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert fast_path.plain_queue_options(args) is None
    typer_options(args, monkeypatch)  # typer answers it (help, a usage error, its reading)


def test_a_config_file_of_defaults_or_shell_completion_leaves_it_to_typer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[queue]\nme = true\n")
    monkeypatch.setenv("GPUDESK_CONFIG", str(config))
    assert fast_path.plain_queue_options([]) is None
    assert typer_options([], monkeypatch) == QueueOptions(me=True)
    monkeypatch.setenv("GPUDESK_CONFIG", "")
    monkeypatch.setenv("_GPUDESK_COMPLETE", "complete_bash")
    assert fast_path.plain_queue_options([]) is None


MARK = "--- typer loaded: ---"


def entry_point(args: list[str]) -> tuple[str, str, bool, int]:
    """`gpudesk ARGS` through the console script's entry point in a fresh interpreter: its
    output, its errors, whether typer was imported, its exit code."""
    program = (
        "import json, sys\n"
        f"sys.argv = ['gpudesk', *{args!r}]\n"
        "from gpudesk.cli.entry import main\n"
        "code = 0\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code or 0\n"
        f"print({MARK!r})\nprint(json.dumps(['typer' in sys.modules, code]))\n"
    )
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
    )
    out, _, tail = done.stdout.rpartition(MARK + "\n")
    typer_loaded, code = json.loads(tail)
    return out, done.stderr, typer_loaded, code


def _without_remaining(listing: str) -> str:
    """The JSON listing with each running job's remaining time taken out (it moves on between
    two listings, as its TIME does), after checking both carry one: the same job, the same
    source."""
    jobs = json.loads(listing)["jobs"]
    running = [job for job in jobs if job["state"] == "running"]
    assert running and all(job["remaining"]["source"] == "unknown" for job in running)
    for job in running:
        del job["remaining"]
    return json.dumps(jobs, sort_keys=True)


def test_the_fast_path_prints_what_the_typer_command_prints_without_loading_typer(
    engine: EngineHandle, gpudesk: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    sleep = ["sleep", "60"]
    running = engine.submit(*({"name": f"fill-{i}", "command": sleep} for i in range(2)))
    for job in running:
        engine.wait_state(job, "running")
    engine.submit(
        *({"name": f"light-lr0.01-h512-{i}", "command": sleep, "priority": i % 2} for i in range(5))
    )
    # the waiting jobs (a running one's TIME moves on between two listings)
    for args in (
        ["queue", "--state", "queued"],
        ["queue", "-s", "queued", "--limit", "2"],
        ["queue", "--all", "--json"],
    ):
        out, err, typer_loaded, code = entry_point(args)
        assert (code, typer_loaded) == (0, False), err
        expected_code, expected, _ = gpudesk(*args)
        assert expected_code == 0
        if "--json" in args:  # a running job's remaining time moves on too: its fields compared
            out, expected = _without_remaining(out), _without_remaining(expected)
        assert out == expected
        assert "light-lr0.01-h512-1" in out
    # a usage error is typer's, as before: one paragraph, exit 2
    out, err, typer_loaded, code = entry_point(["queue", "--limit", "x"])
    assert (code, typer_loaded) == (2, True)
    assert err.startswith("error: Invalid value for '--limit'") and err.count("\n") == 1
    # the engine's refusal through the fast path: one paragraph, exit 2, no traceback
    out, err, typer_loaded, code = entry_point(["queue", "--state", "sleeping"])
    assert (code, typer_loaded) == (2, False)
    assert err.startswith("error: --state: sleeping is not a job state") and "Traceback" not in err
