"""How every command reports a failure it expects: one `error:` paragraph on stderr and the
exit code, never a traceback, and never a control character or a byte that is not UTF-8 sent raw
(a path or a value quoted in it is spelled as gpudesk.text spells it: `\\x1b`, `\\xff`).
Without typer: `gpudesk queue`'s fast path uses it before typer is imported, and
gpudesk.cli.main wraps every command in it (adding click's usage errors)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from gpudesk.cli.common import CliError
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOT_RUNNING, EXIT_USAGE
from gpudesk.cli.std_streams import say
from gpudesk.text import printable_message


@contextmanager
def reported_failures() -> Iterator[None]:
    """Turns a command's own failure (CliError), the engine's (EngineError), an unusable home
    (HomeError), Ctrl-C and a reader that left the pipe into the message and exit code each
    gets."""
    from gpudesk.api.errors import EngineError
    from gpudesk.paths import HomeError  # UnsafePath is one

    try:
        yield
    except CliError as exc:
        say(f"error: {printable_message(str(exc))}")
        sys.exit(exc.code)
    except EngineError as exc:
        said = as_on_the_command_line(str(exc)) if exc.code == "invalid_args" else str(exc)
        say(f"error: {printable_message(said)}")
        # the engine found the request's arguments wrong (a job it can never run): bad input;
        # a station's engine not running is said as `engine status` says it (3)
        from gpudesk.api.connection import EngineNotListening

        if isinstance(exc, EngineNotListening):
            sys.exit(EXIT_NOT_RUNNING)
        sys.exit(EXIT_USAGE if exc.code == "invalid_args" else EXIT_FAILED)
    except HomeError as exc:
        say(f"error: {printable_message(str(exc))}")
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except RuntimeError as exc:
        # Python 3.11 wraps what a `__set_name__` raises (a dataclass field's, as a module of
        # ours is first imported) in a RuntimeError: a Ctrl-C that lands there is one
        if not isinstance(exc.__cause__, KeyboardInterrupt):
            raise
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        os._exit(0)  # `gpudesk queue | head`: the reader left; that is not an error


# The engine names the request's field its arguments fail at (`'jobs[1]': …`), the words of the
# wire (docs/protocol.md), which a user of the command line never typed. The job references are
# the command's own arguments (each quoted in the message anyway); the other fields the CLI
# sends as they are, each under its option's name.
_WIRE_FIELD = re.compile(r"^'(job|jobs\[\d+\]|unset_env|reason)':? ")
_OPTION_OF_FIELD = {"unset_env": "--unset-env", "reason": "--reason"}


def as_on_the_command_line(message: str) -> str:
    """An engine's refusal of a request's arguments in the command line's words."""
    match = _WIRE_FIELD.match(message)
    if match is None:
        return message
    option = _OPTION_OF_FIELD.get(match[1])
    return (f"{option}: " if option else "") + message[match.end() :]
