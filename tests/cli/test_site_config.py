"""The site's defaults (`/etc/gpudesk/config.toml`, here GPUDESK_SITE_CONFIG): under the user's
config file and the command line; a wrong file is one paragraph naming it; a file anyone but
root could have written (group- or world-writable, a link, another user's, in a folder others
may write to) is refused, as sshd refuses such files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EngineHandle

GPUDESK = [sys.executable, "-m", "gpudesk"]


def gpudesk(site: Path | str, user: Path | str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUDESK_SITE_CONFIG": str(site), "GPUDESK_CONFIG": str(user)}
    return subprocess.run([*GPUDESK, *args], capture_output=True, text=True, timeout=60, env=env)


def test_site_defaults_lie_under_the_users_and_the_command_line(
    engine: EngineHandle, tmp_path: Path
) -> None:
    site = tmp_path / "etc" / "config.toml"
    site.parent.mkdir(mode=0o755)
    site.write_text('[submit]\ntime = "2h"\nmax-attempts = 3\n[queue]\nall = true\n')
    site.chmod(0o644)
    user = tmp_path / "user.toml"
    user.write_text('[submit]\ntime = "30m"\n')
    runs = [
        gpudesk(site, "", "submit", "--json", "--", "true"),  # the site's alone
        gpudesk(site, user, "submit", "--json", "--", "true"),  # the user's time wins
        gpudesk(site, user, "submit", "--json", "--time", "5m", "--", "true"),  # the line wins
    ]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    ids = [json.loads(r.stdout)["id"] for r in runs]
    specs = [engine.show(i).job for i in ids]
    assert [(s.spec.time_limit_s, s.max_attempts) for s in specs] == [
        (7200.0, 3),
        (1800.0, 3),
        (300.0, 3),
    ]
    gpudesk("", "", "wait", "-q", *map(str, ids))
    # `gpudesk queue` (its fast path without typer) lists finished jobs by the site's default
    listed = gpudesk(site, "", "queue")
    assert all(str(i) in listed.stdout for i in ids), listed.stdout
    assert "no queued or running jobs" in gpudesk("", "", "queue").stdout


def refused(site: Path) -> str:
    """`gpudesk grid FR` (no engine) with `site`: it must not run; its one paragraph."""
    result = gpudesk(site, "", "grid", "FR")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and str(site) in result.stderr, result.stderr
    return result.stderr


def test_a_wrong_site_file_is_one_paragraph_naming_it(tmp_path: Path) -> None:
    site = tmp_path / "config.toml"
    for text, fragment in (
        ("[submit\n", "the site config file"),
        ("[sumbit]\ntime = 1\n", "gpudesk has no command 'sumbit'"),
        ("[submit]\ntiem = 1\n", "has no option --tiem"),
    ):
        site.write_text(text)
        site.chmod(0o644)
        assert fragment in refused(site), text
    site.write_text("[submit\n")
    assert "its admin can fix it" in refused(site)


def test_a_site_file_others_could_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "etc"
    folder.mkdir(mode=0o755)
    site = folder / "config.toml"
    site.write_text("[queue]\nall = true\n")
    site.chmod(0o664)
    assert "writable by its group or by everyone (mode 0664)" in refused(site)
    assert "chmod go-w" in refused(site)
    site.chmod(0o644)
    assert gpudesk(site, "", "grid", "FR").returncode == 0  # now it is read
    folder.chmod(0o777)
    assert f"its folder {folder} is writable" in refused(site)
    folder.chmod(0o755)
    link = folder / "linked.toml"
    link.symlink_to(site)
    assert "a link, not followed" in refused(link)


def test_another_users_site_file_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    site = tmp_path / "config.toml"
    site.write_text("[queue]\nall = true\n")
    site.chmod(0o644)
    os.chown(site, 65534, 65534)
    assert "owned by uid 65534" in refused(site)
