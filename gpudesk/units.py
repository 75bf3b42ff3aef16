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


def carbon_g(joules: float | None, g_per_kwh: float) -> float | None:
    """Grams of CO2e for `joules` at a grid intensity of `g_per_kwh`; None for unknown energy."""
    return None if joules is None else joules / J_PER_KWH * g_per_kwh
