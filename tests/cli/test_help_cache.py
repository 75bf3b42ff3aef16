"""`gpudesk --version` and `gpudesk --help` answer before typer and the commands load: the version
at once, the root help from the user's cache once it has been rendered for the terminal's width
(gpudesk.cli.help_cache). The kept text is exactly what rendering prints, and anything it is made
from changing (a command module, the config file, the width) renders it again."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpudesk
from gpudesk.cli import help_cache
from gpudesk.cli.exit_codes import EXIT_USAGE

MARK = "--- typer loaded: ---"


# Root keeps no cache (gpudesk.cli.help_cache). The tests of the cache's own workings run as
# whoever runs the suite: as root (CI), the interpreter is told to keep one anyway, since this
# venv's Python is not another user's to run; the rule itself is tested as root, unpatched,
# against a real other user's folder (the last test).
AS_A_USER = (
    "import gpudesk.cli.help_cache as cache\ncache._usable = lambda: True\n"
    if os.geteuid() == 0
    else ""
)


def gpudesk_entry(
    args: list[str], cache: Path, columns: int = 80, as_a_user: bool = True, **env: str | None
) -> tuple[str, bool, int]:
    """`gpudesk ARGS` through the console script's entry point in a fresh interpreter: what it
    printed, whether typer was imported, its exit code. A variable given as None is unset."""
    program = (
        "import json, sys\n"
        + (AS_A_USER if as_a_user else "")
        + f"sys.argv = ['gpudesk', *{args!r}]\n"
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
    environment = {name: value for name, value in environment.items() if value is not None}
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
    monkeypatch.setattr(help_cache, "_usable", lambda: True)  # as a user, also under root
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


@pytest.mark.parametrize("variable", ["GPUDESK_CONFIG", "HOME"])
def test_a_path_that_is_not_utf8_is_kept_and_read_back(tmp_path: Path, variable: str) -> None:
    """A config file or home folder named in raw bytes (Latin-1 `café`) is a path like any
    other: the help is printed, kept and read back, and no half-written file is left."""
    raw = os.fsdecode(bytes(tmp_path) + b"/caf\xe9")
    env: dict[str, str | None] = {variable: raw + ".toml" if variable == "GPUDESK_CONFIG" else raw}
    if variable == "HOME":
        env |= {"GPUDESK_CONFIG": None, "XDG_CONFIG_HOME": None}  # the config under HOME
    cache = tmp_path / "cache"
    rendered, typer_loaded, code = gpudesk_entry(["--help"], cache, **env)
    assert code == 0 and typer_loaded and "Usage: gpudesk" in rendered
    kept, typer_loaded, code = gpudesk_entry(["--help"], cache, **env)
    assert code == 0 and not typer_loaded and kept == rendered
    assert [p.name for p in (cache / "gpudesk").iterdir()] == ["root-help-80.txt"]


def test_a_relative_xdg_cache_home_is_ignored(tmp_path: Path) -> None:
    """The XDG spec: a relative XDG_CACHE_HOME is invalid. The cache goes under HOME, not into
    whatever folder the command was run from."""
    here, home = tmp_path / "here", tmp_path / "home"
    here.mkdir()
    program = (
        AS_A_USER + "import os\nfrom gpudesk.cli import help_cache\n"
        "help_cache.keep_root_help('the help\\n', '')\nprint(help_cache.cached_root_help())\n"
    )
    environment = {**os.environ, "XDG_CACHE_HOME": "cache", "HOME": str(home), "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=here, capture_output=True, text=True, env=environment, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "the help\n\n", done.stderr
    assert list(here.iterdir()) == []
    assert (home / ".cache" / "gpudesk" / "root-help-80.txt").is_file()


def test_a_cache_that_cannot_be_written_is_passed_over(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache folder's parent is a file: nothing can be kept there
    printed, _, code = gpudesk_entry(["--help"], blocked)
    assert code == 0 and "Usage: gpudesk" in printed
    again, typer_loaded, _ = gpudesk_entry(["--help"], blocked)
    assert again == printed and typer_loaded


def test_root_neither_reads_nor_writes_a_cache_in_a_users_folder(tmp_path: Path) -> None:
    """`sudo gpudesk --help` may keep HOME (so the cache folder) a user's: root prints the help
    it renders, not a text she planted, and leaves nothing in her folder."""
    if os.geteuid() != 0:
        pytest.skip("the rule is root's: run as root to test it")
    her = pwd.getpwnam("nobody")  # a real other user of this machine
    folder = tmp_path / "hers"
    (folder / "gpudesk").mkdir(parents=True)
    planted = folder / "gpudesk" / "root-help-80.txt"
    planted.write_text("\nplanted\n\x1b]0;owned\x07the help she wrote\n")
    for path in (folder, folder / "gpudesk", planted):
        os.chown(path, her.pw_uid, her.pw_gid)
    printed, typer_loaded, code = gpudesk_entry(["--help"], folder, as_a_user=False)
    assert code == 0 and typer_loaded and "Usage: gpudesk" in printed
    assert "she wrote" not in printed
    assert sorted(p.name for p in (folder / "gpudesk").iterdir()) == ["root-help-80.txt"]
    assert "she wrote" in planted.read_text()


def test_a_site_config_file_that_turns_bad_renders_the_help_again(tmp_path: Path) -> None:
    """The site's file (gpudesk.cli.site_config) is part of what the help is made from too."""
    site, cache = tmp_path / "site.toml", tmp_path / "cache"
    first, _, _ = gpudesk_entry(["--help"], cache, GPUDESK_SITE_CONFIG=str(site))
    kept, typer_loaded, _ = gpudesk_entry(["--help"], cache, GPUDESK_SITE_CONFIG=str(site))
    assert not typer_loaded and kept == first
    site.write_text("refresh = 2.5\n")  # not under a [command]
    site.chmod(0o644)
    printed, typer_loaded, code = gpudesk_entry(["--help"], cache, GPUDESK_SITE_CONFIG=str(site))
    assert typer_loaded and code == EXIT_USAGE and not printed
