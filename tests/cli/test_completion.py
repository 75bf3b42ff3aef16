"""Shell completion: job ids and names come from a running engine, and from nowhere (fast, with
no engine started) when none runs. Real engines, real `gpudesk` processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EngineHandle

from gpudesk.api.connection import engine_pid
from gpudesk.cli.common import complete_job
from gpudesk.paths import Home

# What bash's completion function runs at a Tab, word by word (`gpudesk --show-completion bash`)
PROBE = (
    "import os, sys\n"
    "from gpudesk.cli.main import main\n"
    "try:\n    main([])\nexcept SystemExit:\n    pass\n"
    "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n"
)


def complete_in_bash(words: str) -> list[str]:
    env = {
        **os.environ,
        "_GPUDESK_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split(" ")) - 1),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    *offered, torch = done.stdout.splitlines()
    assert torch == "NO-TORCH"
    return [word for word in offered if word]  # bash's form of none is one empty line


def test_job_arguments_complete_from_the_running_engine(engine: EngineHandle) -> None:
    first, second = engine.submit(
        {"name": "alpha", "command": ["true"]}, {"name": "beta", "command": ["true"]}
    )
    engine.wait_all_done([first, second])
    offered = dict(complete_job(""))
    assert {str(first), str(second), "alpha", "beta"} <= offered.keys()
    assert offered[str(first)] == "alpha (succeeded)"
    assert [word for word, _ in complete_job("al")] == ["alpha"]
    assert complete_job("zzz") == []
    assert complete_in_bash("gpudesk logs al") == ["alpha"]
    assert complete_in_bash("gpudesk cancel 1 b") == ["beta"]
    assert complete_in_bash("gpudesk submit --after al") == ["alpha"]
    assert complete_in_bash("gpudesk suspend al") == ["alpha"]
    assert complete_in_bash("gpudesk resume b") == ["beta"]
    assert complete_in_bash("gpudesk cancel --signal U") == ["USR1", "USR2"]
    assert complete_in_bash("gpudesk undr") == ["undrain"]


def test_with_no_engine_completion_is_silent_fast_and_starts_none(home: Home) -> None:
    started = time.monotonic()
    assert complete_job("") == []
    assert time.monotonic() - started < 0.5
    assert complete_in_bash("gpudesk logs ") == []
    assert engine_pid(home) is None and not home.lock.exists()


def test_the_completion_script_is_shown_and_installed(home: Home, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "SHELL": "/bin/bash"}

    def gpudesk(option: str, shell: str = "bash") -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "gpudesk", option, shell],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    shown = gpudesk("--show-completion")
    assert shown.returncode == 0, shown.stderr
    assert "_GPUDESK_COMPLETE=complete_bash" in shown.stdout
    # the shell named is the one used, whatever shell runs the command (it was ignored)
    zsh = gpudesk("--show-completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef gpudesk"), zsh
    assert "_GPUDESK_COMPLETE=complete_zsh" in zsh.stdout
    tcsh = gpudesk("--show-completion", "tcsh")
    assert tcsh.returncode == 2 and not tcsh.stdout
    assert tcsh.stderr == (
        "error: --show-completion: gpudesk completes words in bash, zsh, fish, powershell and "
        "pwsh; 'tcsh' is not one of them\n"
    )
    installed = gpudesk("--install-completion")
    assert installed.returncode == 0, installed.stderr
    assert "gpudesk" in (tmp_path / ".bashrc").read_text()


def test_with_no_shell_to_be_found_the_user_is_asked_to_name_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run where no shell is among its parents (a provisioning script, a detached session),
    `--show-completion` takes $SHELL's, else says to name one: it printed "Shell  not
    supported"."""
    import shellingham

    from gpudesk.cli import completion_setup

    def no_shell() -> tuple[str, str]:
        raise shellingham.ShellDetectionFailure()

    # an option after it is typer's to answer (`--show-completion --help`), as is more than a name
    assert not completion_setup.asked(["--show-completion", "--help"])
    assert not completion_setup.asked(["--show-completion", "zsh", "extra"])
    assert completion_setup.asked(["--install-completion"])
    monkeypatch.setattr(shellingham, "detect_shell", no_shell)
    monkeypatch.setenv("SHELL", "/usr/bin/zsh")
    assert completion_setup.run(["--show-completion"]) == 0
    assert capsys.readouterr().out.startswith("#compdef gpudesk")
    monkeypatch.delenv("SHELL")
    assert completion_setup.run(["--install-completion"]) == 2
    said = capsys.readouterr()
    assert not said.out and said.err.startswith(
        "error: --install-completion: cannot tell which shell this is"
    )
    assert "`gpudesk --install-completion bash`" in said.err
