"""`gpudesk --show-completion [SHELL]` and `--install-completion [SHELL]`: the shell named, or the
one this command runs under.

typer's own options take no shell name: they read it from the processes above this one
(shellingham), so `--show-completion zsh` typed in bash printed bash's script, and run where no
shell is among this process's parents (a provisioning script, a cron job, a detached session)
they failed with "Shell  not supported". Here a shell that is named is the one used; one that is
not named is detected, else taken from $SHELL, else the user is asked to name it. The scripts
and the installation are typer's (`typer._completion_shared`, the same since typer 0.4).
"""

from __future__ import annotations

import os
import sys

from gpudesk.cli.exit_codes import EXIT_USAGE

OPTIONS = ("--show-completion", "--install-completion")
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
PROG_NAME = "gpudesk"
COMPLETE_VAR = "_GPUDESK_COMPLETE"  # what the scripts set for the command to complete words


def asked(args: list[str]) -> bool:
    """Whether the command line is one of the two options, alone or with a shell's name (not
    with an option: `--show-completion --help` is typer's to answer)."""
    return (
        bool(args)
        and args[0] in OPTIONS
        and (args[1:] == [] or (len(args) == 2 and not args[1].startswith("-")))
    )


def run(args: list[str]) -> int:
    """Show or install the completion script `args` (`asked`) asks for; the exit status. A
    shell gpudesk cannot complete in, or none to be found, is said in one paragraph (exit 2)."""
    option, named = args[0], (args[1] if len(args) > 1 else None)
    shell = named.lower() if named is not None else _shell_here()
    if shell is None:
        return _refuse(
            f"{option}: cannot tell which shell this is (none among this command's parent "
            "processes, and $SHELL is not set): name it, as in "
            f"`gpudesk {option} bash` (one of {', '.join(SHELLS)})"
        )
    if shell not in SHELLS:
        return _refuse(
            f"{option}: gpudesk completes words in {', '.join(SHELLS[:-1])} and {SHELLS[-1]}; "
            f"{shell!r} is not one of them"
        )
    from typer import _completion_shared as typer_completion

    if option == "--show-completion":
        script = typer_completion.get_completion_script(
            prog_name=PROG_NAME, complete_var=COMPLETE_VAR, shell=shell
        )
        print(script)
        return 0
    _, path = typer_completion.install(shell=shell, prog_name=PROG_NAME, complete_var=COMPLETE_VAR)
    print(f"{shell} completion installed in {path}")
    print("Completion will take effect once you restart the terminal")
    return 0


def _shell_here() -> str | None:
    """The shell this command runs under: the nearest among its parent processes, else the
    user's login shell ($SHELL), else None."""
    import shellingham

    try:
        name, _ = shellingham.detect_shell()
        return str(name).lower()
    except shellingham.ShellDetectionFailure:
        pass
    login = os.environ.get("SHELL", "")
    return os.path.basename(login).lower() or None


def _refuse(message: str) -> int:
    from gpudesk.text import printable_message

    print(f"error: {printable_message(message)}", file=sys.stderr)
    return EXIT_USAGE
