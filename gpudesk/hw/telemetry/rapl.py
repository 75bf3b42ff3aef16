"""CPU package energy from Intel/AMD RAPL (`/sys/class/powercap/intel-rapl*`), where readable.

Since 2020 most distributions make `energy_uj` readable by root only; then there is simply no CPU
energy, and every view says so rather than guessing.
"""

from __future__ import annotations

import glob
import os

import msgspec

POWERCAP_GLOB = "/sys/class/powercap/intel-rapl:*"


class _Domain(msgspec.Struct):
    path: str
    max_uj: int
    last_uj: int | None = None


class RaplReader:
    """Cumulative CPU package energy (J) since the first reading, with counter wrap-around."""

    def __init__(self, pattern: str = POWERCAP_GLOB) -> None:
        self.domains: list[_Domain] = []
        self.problem: str | None = None
        self.total_j = 0.0
        for directory in sorted(glob.glob(pattern)):
            if directory.count(":") != 1:  # intel-rapl:0:0 is a sub-domain (core, dram) of 0
                continue
            try:
                with open(os.path.join(directory, "name")) as f:
                    if not f.read().startswith("package"):
                        continue
                with open(os.path.join(directory, "max_energy_range_uj")) as f:
                    max_uj = int(f.read())
                self._read(directory)
            except (OSError, ValueError) as exc:
                self.problem = f"RAPL is not readable ({exc.__class__.__name__}: {exc})"
                continue
            self.domains.append(_Domain(directory, max_uj))
        if not self.domains and self.problem is None:
            self.problem = "no RAPL package domains under /sys/class/powercap"

    @property
    def available(self) -> bool:
        return bool(self.domains)

    @staticmethod
    def _read(directory: str) -> int:
        with open(os.path.join(directory, "energy_uj")) as f:
            return int(f.read())

    def read(self) -> float | None:
        """Energy (J) since the first call, or None when RAPL cannot be read."""
        if not self.domains:
            return None
        for domain in self.domains:
            try:
                now = self._read(domain.path)
            except (OSError, ValueError):
                continue
            if domain.last_uj is not None:
                delta = now - domain.last_uj
                if delta < 0:  # the counter wrapped
                    delta += domain.max_uj
                self.total_j += delta / 1e6
            domain.last_uj = now
        return self.total_j
