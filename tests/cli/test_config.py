"""The user's config file gives command options their defaults; the command line wins; a
wrong file is one paragraph and nothing runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle

from gpudesk.paths import Home

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(config: Path | str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUDESK_CONFIG": str(config)}
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env)


def test_defaults_from_the_config_file_and_the_command_line_wins(
    engine: EngineHandle, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[submit]\ntime = "2h"\nmax-attempts = 2\n[queue]\nall = true\n')
    first = gpudesk(config, "submit", "--json", "--", "true")
    assert first.returncode == 0, first.stderr
    second = gpudesk(
        config, "submit", "--json", "--time", "5m", "--max-attempts", "1", "--", "true"
    )
    # `--time none` (as sbatch's --time=0, scontrol's UNLIMITED) lifts the file's limit
    unlimited = [
        gpudesk(config, "submit", "--json", "--time", word, "--", "true")
        for word in ("none", "0", "UNLIMITED")
    ]
    ids = [json.loads(r.stdout)["id"] for r in (first, second, *unlimited)]
    specs = [engine.show(i).job for i in ids]
    assert [(s.spec.time_limit_s, s.max_attempts) for s in specs] == [
        (7200.0, 2),
        (300.0, 1),
        *[(None, 2)] * 3,
    ]
    gpudesk(config, "wait", "-q", *map(str, ids))
    listed = gpudesk(config, "queue")  # [queue] all = true: finished jobs too
    assert all(str(i) in listed.stdout for i in ids)
    assert "no queued or running jobs" in gpudesk("", "queue").stdout  # no config file


def test_a_wrong_config_file_is_one_paragraph_and_nothing_runs(
    engine: EngineHandle, tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    for text, fragment in (
        ("[sumbit]\ntime = 1\n", "gpudesk has no command 'sumbit'"),
        ("[submit]\ntiem = 1\n", "[submit] tiem: `gpudesk submit` has no option --tiem"),
        ("[submit\n", "is not valid TOML"),
        ("submit = 3\n", "is not a table"),
        (b"[submit]\nname = '\xff'\n", "is not UTF-8 text"),
        # a flag is true or false: click's own conversion of a number raised a traceback
        ("[submit]\nhold = 0\n", "[submit] hold: expected true or false, found 0 (integer)"),
        ("[submit]\nhold = [1]\n", "[submit] hold: expected true or false, found [1] (array)"),
    ):
        if isinstance(text, bytes):
            config.write_bytes(text)
        else:
            config.write_text(text)
        result = gpudesk(config, "submit", "--", "true")
        assert result.returncode == 2, (text, result.stderr)
        assert fragment in result.stderr and "Traceback" not in result.stderr
        assert str(config) in result.stderr
    assert engine.client.request("jobs")["jobs"] == []
    missing = gpudesk(tmp_path / "absent.toml", "queue")  # no file: no defaults, no error
    assert missing.returncode == 0, missing.stderr


def test_every_problem_of_the_config_files_is_said_at_once(tmp_path: Path) -> None:
    """A file with three wrong keys was said one at a time: fix, run, fix, run. Every problem
    of the site's file and the user's is one line of one paragraph, naming its file, line,
    table and key; nothing runs."""
    user, site = tmp_path / "config.toml", tmp_path / "site.toml"
    user.write_text(
        '# mine\n[submit]\ntiem = "2h"\nhold = 0\n[sumbit]\ngpus = 1\n[queue]\nlimit = 1.5\n'
    )
    site.write_text("[queue]\nall = true\nbad = 3\n")
    env = {**os.environ, "GPUDESK_CONFIG": str(user), "GPUDESK_SITE_CONFIG": str(site)}
    result = subprocess.run(
        [*GPUDESK, "queue"], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "error: 5 problems in the config files:", result.stderr
    assert [line.split(" (it has")[0] for line in lines[1:]] == [
        f"  {site}:3: [queue] bad: `gpudesk queue` has no option --bad",
        f"  {user}:3: [submit] tiem: `gpudesk submit` has no option --tiem",
        f"  {user}:4: [submit] hold: expected true or false, found 0 (integer)",
        f"  {user}:5: [sumbit]: gpudesk has no command 'sumbit' here",
        f"  {user}:8: [queue] limit: expected a whole number, found 1.5 (number)",
    ], result.stderr
    one = gpudesk(user, "queue")  # the user's alone: one file
    assert one.stderr.startswith("error: 4 problems in the config file:\n"), one.stderr


def test_a_bad_value_from_a_file_names_the_file_the_table_and_the_key(tmp_path: Path) -> None:
    """click checks a default from a file as if typed, and said only "Invalid value for
    '--timeout'", which a user who typed no --timeout could not place, and one a run. A value
    whose check needs only the value (a number, a range, a choice) is checked as the files are
    read: every such value of both files is said at once, each naming its file, line, table
    and key, before any command runs (`engine stop` is refused for the site's `[top]` too, as
    for an unknown key). Typed, the same value names no file."""
    user, site = tmp_path / "config.toml", tmp_path / "site.toml"
    user.write_text('[engine.stop]\ntimeout = "soon"\n[submit]\nmem = "lots"\npriority = 1.5\n')
    site.write_text("[top]\ninterval = 0.01\n[engine.stop]\ntimeout = 5\n[queue]\nlimit = 0\n")
    env = {
        **os.environ,
        "GPUDESK_CONFIG": str(user),
        "GPUDESK_SITE_CONFIG": str(site),
        "GPUDESK_HOME": str(tmp_path / "home"),
    }

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GPUDESK, *args], capture_output=True, text=True, timeout=60, env={**env, **extra}
        )

    stop = run("engine", "stop")
    assert stop.returncode == 2 and "Traceback" not in stop.stderr, stop.stderr
    assert stop.stderr.splitlines() == [
        "error: 5 problems in the config files:",
        f"  {site}:2: [top] interval: 0.01 is not in the range 0.1<=x<=3600",
        f"  {site}:6: [queue] limit: 0 is not in the range x>=1",
        f"  {user}:2: [engine.stop] timeout: expected a number, found 'soon' (string)",
        f"  {user}:4: [submit] mem: expected a number, found 'lots' (string)",
        f"  {user}:5: [submit] priority: expected a whole number, found 1.5 (number)",
    ], stop.stderr
    typed = run("top", "--once", "--interval", "0.01", GPUDESK_CONFIG="", GPUDESK_SITE_CONFIG="")
    assert typed.returncode == 2 and "comes from" not in typed.stderr, typed.stderr
    assert "0.01 is not in the range 0.1<=x<=3600" in typed.stderr, typed.stderr


def test_a_value_gpudesks_own_checks_refuse_names_the_file_its_line_and_key(
    engine: EngineHandle, tmp_path: Path
) -> None:
    """A value click takes (a string) but gpudesk's own checks refuse was said as the option
    (`--time: …`), which a user who typed no --time could not place: the file that gave it is
    named, with the line, table and key, the user's or the site's."""
    user, site = tmp_path / "config.toml", tmp_path / "site.toml"
    user.write_text('# my defaults\n[submit]\ngpus = 0\ntime = "soon"\n')
    site.write_text("[submit]\nmax_attempts = 0\n")
    env = {**os.environ, "GPUDESK_CONFIG": str(user), "GPUDESK_SITE_CONFIG": str(site)}

    def submit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GPUDESK, "submit", *args, "--", "true"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )

    for args, said in (
        ((), f"{user}:4: [submit] time: 'soon' is not a duration"),
        (("--time", "1h"), f"{site}:2: [submit] max_attempts: expected a whole number from 1"),
    ):
        refused = submit(*args)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith(f"error: {said}"), refused.stderr
        assert (
            refused.stderr.count("\n") == 1 and "on the command line overrides it" in refused.stderr
        )
    typed = submit("--time", "later", "--max-attempts", "1")  # typed: the option is named
    assert typed.returncode == 2 and typed.stderr.startswith("error: --time: 'later'"), typed
    assert engine.client.request("jobs")["jobs"] == []


def test_an_engine_setting_its_own_checks_refuse_names_the_file_its_line_and_key(
    home: Home, tmp_path: Path
) -> None:
    """`[engine.start] slots = -3` was said as the station's key (`station.slots: expected …`),
    naming neither the file nor the line; typed, it names the option (`--slots`)."""
    config = tmp_path / "config.toml"
    config.write_text("[engine.start]\nslots = -3\n")
    refused = gpudesk(config, "engine", "start")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith(
        f"error: {config}:2: [engine.start] slots: expected a whole number from 1 to 4096, "
        "found -3 (integer) (a default from the config file; --slots on the command line "
        "overrides it)"
    ), refused.stderr
    assert refused.stderr.count("\n") == 1
    typed = gpudesk("", "engine", "start", "--slots", "-3")
    assert typed.returncode == 2 and typed.stderr.startswith("error: --slots: expected"), typed
    assert not home.db.exists()  # refused before any engine started


@pytest.mark.parametrize(
    ("table", "line", "expected"),
    [
        # click iterated a number, a boolean or a string given to a repeatable option (a
        # TypeError traceback, or "Value must be an iterable"), took float([1]) for a number
        # (another), and int(1.5), silently 1, for a whole number
        ("[submit]\nafter = 5", "[submit] after", "an array of text, one item for each --after"),
        ("[submit]\nenv = 5", "[submit] env", "an array of text, one item for each --env"),
        (
            '[submit]\nenv = "A=1"',
            "[submit] env",
            "an array of text, one item for each --env typed (env = [\"...\"]), found 'A=1'",
        ),
        ("[submit]\nafter = true", "[submit] after", "an array of text"),
        (
            "[submit]\nafter-any = 1.5",
            "[submit] after-any",
            "an array of text, one item for each --after-any",
        ),
        ("[submit]\nafter = [[1]]", "[submit] after", "an array of text"),
        ("[loader.serve]\narg = 1", "[loader.serve] arg", "an array of text"),
        ("[cancel]\ngrace = [1]", "[cancel] grace", "a number, found [1] (array)"),
        ("[queue]\nlimit = 1.5", "[queue] limit", "a whole number, found 1.5 (number)"),
        ("[queue]\nlimit = true", "[queue] limit", "a whole number, found true (boolean)"),
    ],
)
def test_a_value_of_the_wrong_kind_is_said_as_the_files_with_its_line(
    tmp_path: Path, table: str, line: str, expected: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"# mine\n{table}\n")
    for env_name in ("GPUDESK_CONFIG", "GPUDESK_SITE_CONFIG"):  # either file: one check
        env = {**os.environ, env_name: str(config)}
        result = subprocess.run(
            [*GPUDESK, "queue"], capture_output=True, text=True, timeout=60, env=env
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        said = " ".join(result.stderr.split())
        assert said.startswith(f"error: {config}:3: {line}: expected {expected}"), said


def test_values_of_the_right_kind_are_taken(engine: EngineHandle, tmp_path: Path) -> None:
    """A number in an array of text stands for its digits (`after = [12]`), as typed."""
    config = tmp_path / "config.toml"
    config.write_text('[submit]\nenv = ["A=1"]\nafter-any = [1]\n[queue]\nlimit = 5\n')
    before = gpudesk("", "submit", "--json", "--", "true")  # job 1
    assert before.returncode == 0 and json.loads(before.stdout)["id"] == 1, before.stderr
    made = gpudesk(config, "submit", "--json", "--", "true")
    assert made.returncode == 0, made.stderr
    spec = engine.show(json.loads(made.stdout)["id"]).job.spec
    assert spec.after_any == [1] and gpudesk(config, "queue").returncode == 0


# Root, but without the capabilities that let root read any file (tests/faults/
# test_store_damage.py): what a user meets in a folder or file she may not read.
WITHOUT_ROOT_POWERS = ("setpriv", "--bounding-set=-all", "--inh-caps=-all")


COMMANDS = (("submit", "--help"), ("queue",))


def test_a_config_file_that_cannot_be_read_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A user whose config folder she may not enter (a home of mode 000) got a PermissionError
    traceback from every command; one whose file she may not read, an error. Both are one
    line, exit 2: the command does not run without the defaults the file may set."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to drop root's power to read any file")
    shut = tmp_path / "home"
    (shut / ".config").mkdir(parents=True)
    (shut / ".config" / "config.toml").write_text("[queue]\nall = true\n")
    unreadable = tmp_path / "config.toml"
    unreadable.write_text("[queue]\nall = true\n")
    shut.chmod(0)
    unreadable.chmod(0)
    try:
        # `queue` too: its fast path took a folder it cannot enter for one with no file
        cases = [(p, c) for p in (shut / ".config" / "config.toml", unreadable) for c in COMMANDS]
        for path, command in cases:
            env = {**os.environ, "GPUDESK_CONFIG": str(path), "HOME": str(shut)}
            result = subprocess.run(
                [*WITHOUT_ROOT_POWERS, *GPUDESK, *command],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
            said = " ".join(result.stderr.split())
            assert said.startswith(
                f"error: cannot read the config file {path}: Permission denied. Make it "
                "readable, or run without it: GPUDESK_CONFIG= gpudesk"
            ), said
            assert result.stderr.count("\n") == 1
    finally:
        shut.chmod(0o700)
