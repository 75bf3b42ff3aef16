"""Units and the energy-to-carbon conversion: one home for the constants every layer uses.

A leaf module (stdlib only, imports nothing of gpudesk): the engine, the CLI, the desk and the
benchmarks may all import it.
"""

from __future__ import annotations

J_PER_WH = 3600.0  # joules in a watt-hour
J_PER_KWH = 1000.0 * J_PER_WH
MIB = 1024.0  # MiB per GiB, and KiB per MiB: memory is counted in MiB throughout
MIB_PER_GIB = MIB
MIB_PER_GB = MIB  # job hints say "GB" and mean GiB, as the frameworks report it
S_PER_HOUR = 3600.0
BYTES_PER_MIB = 1024 * 1024  # for sizes on disk and on the wire, counted in bytes


def byte_size(n: int) -> str:
    """A size for people: "512 bytes", "64 MiB", "95.4 MiB"."""
    if n < BYTES_PER_MIB:
        return f"{n} bytes"
    whole, rest = divmod(n, BYTES_PER_MIB)
    return f"{n / BYTES_PER_MIB:.1f} MiB" if rest else f"{whole} MiB"


def carbon_g(joules: float | None, g_per_kwh: float) -> float | None:
    """Grams of CO2e for `joules` at a grid intensity of `g_per_kwh`; None for unknown energy."""
    return None if joules is None else joules / J_PER_KWH * g_per_kwh


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
