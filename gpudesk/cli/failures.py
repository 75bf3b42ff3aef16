"""How every command reports a failure it expects: one `error:` paragraph on stderr and the
exit code, never a traceback, and never a control character or a byte that is not UTF-8 sent raw
(a path or a value quoted in it is spelled as gpudesk.text spells it: `\\x1b`, `\\xff`).
Without typer: `gpudesk queue`'s fast path uses it before typer is imported, and
gpudesk.cli.main wraps every command in it (adding click's usage errors)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from gpudesk.cli.common import CliError
from gpudesk.cli.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
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
        say(f"error: {printable_message(str(exc))}")
        # the engine found the request's arguments wrong (a job it can never run): bad input
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
