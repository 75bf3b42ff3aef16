"""`gpudesk --version` and `gpudesk --help` answer before typer and the commands load: the version
at once, the root help from the user's cache once it has been rendered for the terminal's width
(gpudesk.cli.help_cache). The kept text is exactly what rendering prints, and anything it is made
from changing (a command module, the config file, the width) renders it again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpudesk
from gpudesk.cli import help_cache
from gpudesk.cli.exit_codes import EXIT_USAGE

MARK = "--- typer loaded: ---"


def gpudesk_entry(
    args: list[str], cache: Path, columns: int = 80, **env: str
) -> tuple[str, bool, int]:
    """`gpudesk ARGS` through the console script's entry point in a fresh interpreter: what it
    printed, whether typer was imported, its exit code."""
    program = (
        "import json, sys\n"
        f"sys.argv = ['gpudesk', *{args!r}]\n"
        "from gpudesk.cli.entry import main\n"
        "code = 0\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code or 0\n"
        f"print({MARK!r})\nprint(json.dumps(['typer' in sys.modules, code]))\n"
    )
    environment = {
        **os.environ,
        "XDG_CACHE_HOME": str(cache),
        "COLUMNS": str(columns),
        "GPUDESK_CONFIG": "",
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=environment, timeout=60
    )
    assert done.returncode == 0, done.stderr
    printed, _, tail = done.stdout.rpartition(MARK + "\n")
    typer_loaded, code = json.loads(tail)
    return printed, typer_loaded, code


def test_the_version_is_printed_without_loading_typer(tmp_path: Path) -> None:
    printed, typer_loaded, code = gpudesk_entry(["--version"], tmp_path)
    assert printed == f"gpudesk {gpudesk.__version__}\n"
    assert code == 0 and not typer_loaded


@pytest.mark.parametrize("columns", [80, 60])
def test_the_root_help_is_rendered_once_then_read_as_rendered(tmp_path: Path, columns: int) -> None:
    rendered, typer_loaded, code = gpudesk_entry(["--help"], tmp_path, columns)
    assert code == 0 and typer_loaded
    assert "Usage: gpudesk [OPTIONS] COMMAND [ARGS]..." in rendered and "queue" in rendered
    kept, typer_loaded, code = gpudesk_entry(["--help"], tmp_path, columns)
    assert code == 0 and not typer_loaded
    assert kept == rendered
    short, typer_loaded, _ = gpudesk_entry(["-h"], tmp_path, columns)
    assert short == rendered and not typer_loaded
    width = max(len(line) for line in rendered.splitlines())
    assert width <= columns


def test_another_width_is_rendered_for_itself(tmp_path: Path) -> None:
    wide, _, _ = gpudesk_entry(["--help"], tmp_path, 80)
    narrow, typer_loaded, _ = gpudesk_entry(["--help"], tmp_path, 60)
    assert typer_loaded  # not the 80-column text
    assert narrow != wide and max(len(line) for line in narrow.splitlines()) <= 60


def test_a_config_file_that_appears_or_changes_renders_the_help_again(tmp_path: Path) -> None:
    """The root help is checked against the config file as every command is: a file that
    turns bad is said to be bad, not passed over for a help kept from before."""
    config, cache = tmp_path / "config.toml", tmp_path / "cache"
    first, _, _ = gpudesk_entry(["--help"], cache, GPUDESK_CONFIG=str(config))
    config.write_text("[queue]\nme = true\n")
    again, typer_loaded, code = gpudesk_entry(["--help"], cache, GPUDESK_CONFIG=str(config))
    assert typer_loaded, "the help was read from before the config file existed"
    assert code == 0 and again == first
    config.write_text("refresh = 2.5\n")  # not under a [command]
    printed, typer_loaded, code = gpudesk_entry(["--help"], cache, GPUDESK_CONFIG=str(config))
    assert typer_loaded and code == EXIT_USAGE and not printed


def test_a_changed_command_module_renders_the_help_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "gpudesk"
    shutil.copytree(Path(gpudesk.__file__).parent / "cli", package / "cli")
    monkeypatch.setattr(gpudesk, "__file__", str(package / "__init__.py"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    help_cache.keep_root_help("the help\n", "")
    assert help_cache.cached_root_help() == "the help\n"
    module = package / "cli" / "jobs.py"
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert help_cache.cached_root_help() is None


def test_a_cache_that_cannot_be_written_is_passed_over(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache folder's parent is a file: nothing can be kept there
    printed, _, code = gpudesk_entry(["--help"], blocked)
    assert code == 0 and "Usage: gpudesk" in printed
    again, typer_loaded, _ = gpudesk_entry(["--help"], blocked)
    assert again == printed and typer_loaded
