"""`gpudesk queue` before typer is imported.

`gpudesk queue` is what people type most, often in `watch`, and on a busy 2-core station its
start-up is most of its time: importing typer and building the command is about a third of the
CPU the command uses (docs/benchmarks.md). A plain command line — the options `gpudesk queue
--help` lists, each at most once, in their long or short form or `--long=value` — is parsed
here and runs the same function the typer command runs (gpudesk.cli.queue_listing.list_queue).
Anything else goes to typer, which gives its usual help and usage errors: `--help`, a word it
does not know, an option given twice, a value that is missing or looks like an option, a
`--limit` that is not plain digits or is 0, bundled short options (`-aj`), shell completion,
and any config file of option defaults (click applies and checks those).
tests/cli/test_queue_fast_path.py holds the two parsers to the same answers.
"""

from __future__ import annotations

import os
import re

from gpudesk.cli.queue_listing import QueueOptions

# option word -> QueueOptions field
QUEUE_FLAGS = {"--all": "all_jobs", "-a": "all_jobs", "--me": "me", "--json": "json_out"}
QUEUE_FLAGS.update({"--long": "long", "-l": "long"})
QUEUE_VALUES = {
    "--group": "group",
    "-g": "group",
    "--limit": "limit",
    "--user": "user",
    "-u": "user",
    "--state": "state",
    "-s": "state",
    "--name": "name",
}
DIGITS = re.compile(r"[0-9]{1,9}")


def plain_queue_options(args: list[str]) -> QueueOptions | None:
    """The options of `gpudesk queue ARGS` when the command line is plain (above); None where
    typer must read it."""
    if "_GPUDESK_COMPLETE" in os.environ or _has_option_defaults():
        return None
    given: dict[str, object] = {}
    words = iter(args)
    for word in words:
        value: str | None
        parsed: object
        option, equals, value = word.partition("=")
        if not equals:
            value = None
        if option in QUEUE_FLAGS and value is None:
            field, parsed = QUEUE_FLAGS[option], True
        elif option in QUEUE_VALUES and (value is None or option.startswith("--")):
            if value is None:
                value = next(words, None)
            if value is None or value.startswith("-"):
                return None
            field, parsed = QUEUE_VALUES[option], value
            if field == "limit":
                from gpudesk.core.protocol import MAX_ROW_ID  # past it: every job (as jobs.queue)

                parsed = min(int(value), MAX_ROW_ID) if DIGITS.fullmatch(value) else 0
                if parsed < 1:
                    return None  # typer says what is wrong with it
        else:
            return None
        if field in given:
            return None
        given[field] = parsed
    return QueueOptions(**given)  # type: ignore[arg-type]


def _has_option_defaults() -> bool:
    from gpudesk.cli.config import config_path
    from gpudesk.cli.site_config import site_config_path

    return any(p is not None and _may_exist(p) for p in (config_path(), site_config_path()))


def _may_exist(path: os.PathLike[str]) -> bool:
    """Whether a file may be at `path`: one behind a folder this user cannot enter may (the
    full CLI then says it cannot be read, as every other command does, instead of this path
    running without it)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def run_plain_queue(args: list[str]) -> bool:
    """Runs `gpudesk queue ARGS` and says True when its command line is plain; False (nothing
    done) where typer must read it."""
    options = plain_queue_options(args)
    if options is None:
        return False
    from gpudesk.cli.failures import reported_failures
    from gpudesk.cli.queue_listing import list_queue

    with reported_failures():
        list_queue(options)
    return True
