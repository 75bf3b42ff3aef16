"""Units and the energy-to-carbon conversion: one home for the constants every layer uses.

A leaf module (the stdlib, and gpudesk.text, a leaf too, to quote a value in a message): the
engine, the CLI, the desk and the benchmarks may all import it.
"""

from __future__ import annotations

import math
import re

from gpudesk.text import quoted

J_PER_WH = 3600.0  # joules in a watt-hour
J_PER_KWH = 1000.0 * J_PER_WH
MIB = 1024.0  # MiB per GiB, and KiB per MiB: memory is counted in MiB throughout
MIB_PER_GIB = MIB
MIB_PER_GB = MIB  # job hints say "GB" and mean GiB, as the frameworks report it
S_PER_HOUR = 3600.0
BYTES_PER_MIB = 1024 * 1024  # for sizes on disk and on the wire, counted in bytes


def gib(mib: float) -> str:
    """A memory figure counted in MiB, as people read it: "4.0 GiB"."""
    return f"{mib / MIB_PER_GIB:.1f} GiB"


def byte_size(n: int) -> str:
    """A size for people: "512 bytes", "64 MiB", "95.4 MiB"."""
    if n < BYTES_PER_MIB:
        return f"{n} bytes"
    whole, rest = divmod(n, BYTES_PER_MIB)
    return f"{n / BYTES_PER_MIB:.1f} MiB" if rest else f"{whole} MiB"


def exact_byte_size(n: int) -> str:
    """A size for people with its exact count, for a limit that was passed: "512 bytes",
    "1.0 MiB (1,048,576 bytes)"."""
    if n >= BYTES_PER_MIB:
        return f"{n / BYTES_PER_MIB:.1f} MiB ({n:,} bytes)"
    return f"{n:,} bytes"


def seconds(value: float) -> str:
    """A number of seconds someone gave (an option, a setting), said back as it was given:
    "0.5 s", "3 s", "86400 s", never rounded to "0 s"."""
    text = f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}".removesuffix(".0")
    return f"{text} s"


def carbon_g(joules: float | None, g_per_kwh: float) -> float | None:
    """Grams of CO2e for `joules` at a grid intensity of `g_per_kwh`; None for unknown energy."""
    return None if joules is None else joules / J_PER_KWH * g_per_kwh


# a unit by its first letter: 90s, 30m, 10min, 2hours, 1day (--begin's words, Slurm's units)
_DURATION_PART = re.compile(
    r"(\d+(?:\.\d+)?)(days?|d|hours?|h|min(?:ute)?s?|m|sec(?:ond)?s?|s)(?![a-z])"
)
_WITH_UNITS = re.compile(rf"(?:{_DURATION_PART.pattern})+")  # 1h30m: parts, nothing between
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds in a time limit written as sbatch's --time takes it (`90` is 90 minutes, `90:00`
    minutes:seconds, `1:30:00`, `2-0`, `2-12:00`, `2-12:00:00`) or with units (`90s`, `30m`,
    `1h30m`, `2d`). Raises ValueError saying what is accepted."""
    value = text.strip().lower()
    try:
        if _WITH_UNITS.fullmatch(value):
            return sum(float(n) * _UNIT_S[unit[0]] for n, unit in _DURATION_PART.findall(value))
        days = 0.0
        if "-" in value:
            day_text, value = value.split("-", 1)
            days = float(int(day_text))
            parts = [int(p) for p in value.split(":")]
            if not 1 <= len(parts) <= 3:
                raise ValueError
            hours, minutes, seconds = [*parts, 0, 0][:3]
        else:
            parts = [int(p) for p in value.split(":")]
            if len(parts) == 1:
                hours, minutes, seconds = 0, parts[0], 0
            elif len(parts) == 2:
                hours, (minutes, seconds) = 0, parts
            elif len(parts) == 3:
                hours, minutes, seconds = parts
            else:
                raise ValueError
        return days * 86400.0 + hours * 3600.0 + minutes * 60.0 + seconds
    except ValueError:
        raise ValueError(
            f"{quoted(text)} is not a duration: give minutes as sbatch --time does (90, 90:00, "
            "1:30:00, 2-12:00:00) or units (90s, 30m or 30min, 1h30m, 2hours, 2d)"
        ) from None


# What says "no time limit" where one is given (`--time none`): sbatch's --time=0 and
# UNLIMITED / INFINITE (scontrol's TimeLimit=UNLIMITED), so a default ([submit] time) can be
# lifted for one job
NO_TIME_LIMIT = ("0", "none", "unlimited", "infinite")


def no_time_limit(text: str) -> bool:
    """Does `text` ask for no time limit (NO_TIME_LIMIT, in any case)?"""
    return text.strip().lower() in NO_TIME_LIMIT


def sbatch_time(seconds: float) -> str:
    """A time limit as sbatch's --time takes it ("D-HH:MM:SS"), as `--time` reads it back;
    Slurm acts on whole minutes."""
    total = math.ceil(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def watt_hours(joules: float | None) -> str:
    """Energy for people, in Wh (kWh from 1,000 Wh), as a power bill counts it; JSON keeps
    joules. "n/a" for unknown energy, "<0.01 Wh" for a measured trace below that."""
    if joules is None:
        return "n/a"
    wh = joules / J_PER_WH
    if wh >= 1000:
        return f"{wh / 1000:.2f} kWh"
    if wh >= 100:
        return f"{wh:.0f} Wh"
    if wh >= 10:
        return f"{wh:.1f} Wh"
    if wh >= 0.01 or wh <= 0:
        return f"{max(wh, 0.0):.2f} Wh"
    return "<0.01 Wh"
