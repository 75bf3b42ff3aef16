"""TOML nested past Python's stack, or holding a number past int()'s digit limit, is one
paragraph and a non-zero exit (issue 36, finding 11b).

tomllib recurses once per level of nesting, so `a = [[[[…` (100,000 of them) raises
RecursionError, and a 5,000-digit integer raises a plain ValueError (Python's int() limit):
neither is a TOMLDecodeError, and the config file (GPUDESK_CONFIG), read before every command,
let them through as a traceback, so every command died. Profiles (`gpudesk run`) already said
it in one paragraph; `gpudesk engine set KEY=VALUE` parses each value as TOML too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import refuses

from gpudesk.paths import Home

GPUDESK = [sys.executable, "-m", "gpudesk"]
DEEP = "[" * 100_000  # far past any recursion limit Python allows by default (1000)
LONG_NUMBER = "9" * 5_000  # past int()'s default limit of 4300 digits (sys.int_info)


def gpudesk(config: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUDESK_CONFIG": str(config)}
    return subprocess.run(
        [*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (DEEP, "arrays or inline tables are nested too deeply"),
        (LONG_NUMBER, "a number is too long"),
    ],
    ids=["nested", "long number"],
)
@pytest.mark.parametrize("command", [("queue",), ("submit", "--", "true"), ("run", "x.toml")])
def test_a_config_file_past_the_parsers_limits_is_one_paragraph(
    home: Home, tmp_path: Path, value: str, reason: str, command: tuple[str, ...]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"[submit]\nname = {value}\n")
    refuses(gpudesk(config, *command), f"the config file {config} is not valid TOML", reason)
    assert not home.db.exists()  # nothing ran: no engine was started


def test_a_profile_nested_too_deeply_is_one_paragraph(home: Home, tmp_path: Path) -> None:
    """Already so before (gpudesk.profile catches RecursionError): kept so."""
    profile = tmp_path / "deep.toml"
    profile.write_text(f'[[jobs]]\nname = "x"\ncommand = {DEEP}\n')
    done = gpudesk("", "run", str(profile))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert "nested too deeply" in done.stderr, done.stderr


@pytest.mark.parametrize("value", [DEEP, LONG_NUMBER], ids=["nested", "long number"])
def test_engine_set_with_a_value_past_the_parsers_limits_is_one_paragraph(
    home: Home, value: str
) -> None:
    """The value is taken as the word it is, and the setting's own check refuses it."""
    refuses(gpudesk("", "engine", "set", f"slots={value}"), "station.slots")


def test_a_factory_argument_nested_past_the_stack_is_one_paragraph(home: Home) -> None:
    """`--arg key=VALUE` reads VALUE as JSON where it parses: `[[[[…` raised RecursionError."""
    done = gpudesk("", "loader", "serve", "syn", "--dataset", "m:f", "--arg", f"x={DEEP}")
    assert done.returncode == 2, done.stderr
    refuses(done, "--arg", "'x': its JSON value is nested too deeply to read")
