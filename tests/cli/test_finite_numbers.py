"""Every float option refuses NaN and infinity (gpudesk.cli.param_rules): click reads `nan`,
`inf` and `1e400` as floats, and its range check lets NaN through."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from conftest import refuses

from gpudesk.cli.main import _click_error, build_app
from gpudesk.cli.param_rules import FLOAT_TYPE_NAMES, apply_rules


def gpudesk(tmp_path: Path, argv: list[str], config: str) -> subprocess.CompletedProcess[str]:
    """`gpudesk ARGV` in a home of its own, with `config` as GPUDESK_CONFIG ("": none)."""
    env = {**os.environ, "GPUDESK_HOME": str(tmp_path / "home"), "GPUDESK_CONFIG": config}
    return subprocess.run(
        [sys.executable, "-m", "gpudesk", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def float_options(command: Any, path: str = "gpudesk") -> list[tuple[str, Any]]:
    found = [
        (f"{path} {param.opts[0]}", param)
        for param in command.params
        if getattr(param.type, "name", None) in FLOAT_TYPE_NAMES
    ]
    for name, sub in getattr(command, "commands", {}).items():
        found += float_options(sub, f"{path} {name}")
    return found


def test_every_float_option_of_the_tree_refuses_nan_and_infinity() -> None:
    """Walked over the whole tree, so that an option added later is held to it too."""
    command = typer.main.get_command(build_app())
    apply_rules(command)
    options = float_options(command)
    assert len(options) >= 10, options  # --refresh, --mem, --timeout, --interval, ...
    bad_parameter = _click_error("BadParameter")
    for where, param in options:
        for word in ("nan", "inf", "-inf", "1e400"):
            with pytest.raises(bad_parameter):
                param.type.convert(word, param, None)
        assert param.type.convert("2.5", param, None) == 2.5, where


def test_a_range_still_shows_in_the_help_and_click_float_is_left_as_it_was() -> None:
    command = typer.main.get_command(build_app())
    untouched = next(p for _, p in float_options(command) if p.type.name == "float").type
    apply_rules(command)
    assert untouched.convert("nan", None, None) != untouched.convert("nan", None, None)  # NaN
    top = command.commands["top"]
    ctx = top.make_context("top", [], resilient_parsing=True)
    assert "0.1<=x<=3600" in " ".join(top.get_help(ctx).split())


@pytest.mark.parametrize(
    "argv",
    [
        # a traceback from the socket's settimeout before
        ["engine", "stop", "--timeout", "nan"],
        # these ran: a NaN interval, a NaN-second calibration
        ["top", "--interval", "nan", "--once"],
        ["calibrate", "--seconds", "nan"],
        ["wait", "1", "--timeout", "inf"],
    ],
)
def test_the_command_line_gets_one_usage_paragraph(tmp_path: Path, argv: list[str]) -> None:
    done = gpudesk(tmp_path, argv, config="")
    assert done.returncode == 2
    refuses(done, "is not a finite number", "--help says more")


def test_a_config_files_default_is_held_to_it_too(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[top]\ninterval = nan\n")
    done = gpudesk(tmp_path, ["top", "--once"], config=str(config))
    assert done.returncode == 2
    refuses(done, f"{config}:2: [top] interval: nan is not a finite number")
