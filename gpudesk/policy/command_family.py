"""A job's *command family*: its command line with the hyper-parameter values taken out, so the
members of a sweep (`train.py --lr 0.1` and `train.py --lr 0.01`) share what the first one
measured (its memory, SM activity and run time; docs/interference.md, "Command families").

The rule, argument by argument (the program, `command[0]`, is kept as it is):
- an argument that parses as a number (`0.1`, `-3`, `1e-4`, `64`) becomes `#`: a value of the
  option before it (`--lr 0.1`) or a numeric positional (`train.py 64`);
- `--opt=NUMBER` becomes `--opt=#`;
- everything else is kept: options, subcommands, paths, non-numeric values (`--model resnet50`
  and `--model vit` are different families: they need different memory).
The working directory is part of the family (the same script in two checkouts may differ).

A sweep over a size (`--batch 64` / `--batch 256`) is one family too, though its members' memory
differs: what the family measured is therefore placed with the margin of a guess, not the 3 %
of the same command's own peak (`JobDemand.of`), and an out-of-memory death raises it as any.
"""

from __future__ import annotations

import functools
import hashlib
import json

PLACEHOLDER = "#"
# How many commands' keys (`family`, `demand.signature`) are kept: each is asked for every queued
# job on every placement pass, so the cache must hold the whole queue or it misses on every
# call. Issue 39 sizes a long queue at 10,000 jobs; with 4,096 kept, a pass over 10,000 queued
# commands hashed them all again (47 ms), with 16,384 it finds them (2.4 ms; docs/benchmarks.md).
KEYS_CACHED = 16_384


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    # "nan", "inf", "infinity" parse as floats but are words a command line may mean as words
    return any(c.isdigit() for c in text)


def _generalised(argument: str) -> str:
    if _is_number(argument):
        return PLACEHOLDER
    if argument.startswith("-") and "=" in argument:
        option, value = argument.split("=", 1)
        if _is_number(value):
            return f"{option}={PLACEHOLDER}"
    return argument


def family_words(command: tuple[str, ...]) -> tuple[str, ...]:
    """The command with its numeric values replaced by `#` (the program kept as it is)."""
    if not command:
        return ()
    return (command[0], *(_generalised(a) for a in command[1:]))


@functools.lru_cache(maxsize=KEYS_CACHED)
def family(command: tuple[str, ...], workdir: str | None) -> str:
    """The key of a command family: its words and working directory, hashed."""
    text = json.dumps(["family", list(family_words(command)), workdir or ""])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def owner_key(uid: int, key: str) -> str:
    """A history's key for one owner: what a command or a family measured is kept per owner
    (the engine's demand, family and hint-ratio histories), so on a shared station one member's
    runs in a shared folder never set the room, nor the run time, another's jobs are given."""
    return f"{uid}:{key}"
