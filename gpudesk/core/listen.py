"""Where the engine's Prometheus endpoint listens: `[station] metrics_listen`, checked and put
in one canonical form.

"HOST:PORT" with HOST an IPv4 address, a bracketed IPv6 address or `localhost`, and PORT 0 to
65535 (0: any free port, the one bound is reported). A bare port ("9400") means the loopback
address: the metrics name every job and user on the station, so they leave the machine only
where an admin writes a non-loopback address ("0.0.0.0:9400") on purpose. ":9400" is refused
rather than guessed at: Go exporters (dcgm-exporter, node_exporter) read it as every interface.
"off" (what a profile writes, TOML having no null) is the same as none: no endpoint.

Host names other than `localhost` are refused too: resolving one would be a DNS lookup on the
engine's loop, and a name that resolves differently tomorrow is no way to pick an interface.
"""

from __future__ import annotations

import errno
import ipaddress
from typing import Any

import msgspec

from gpudesk.core.jobs import describe

LOOPBACK = "127.0.0.1"
OFF = "off"
EXAMPLE = '"127.0.0.1:9400"'


class ListenAddress(msgspec.Struct, frozen=True):
    host: str  # an IP address: "127.0.0.1", "::1", "0.0.0.0"
    port: int  # 0: any free port

    @property
    def ipv6(self) -> bool:
        return ":" in self.host

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.host).is_loopback

    def text(self, port: int | None = None) -> str:
        """ "127.0.0.1:9400", "[::1]:9400"; with `port`, that port instead of this one."""
        host = f"[{self.host}]" if self.ipv6 else self.host
        return f"{host}:{self.port if port is None else port}"


def parse_listen(value: Any) -> ListenAddress:
    """The address `value` names; ValueError saying what is wrong and what to write."""
    if not isinstance(value, str):
        number = isinstance(value, int) and not isinstance(value, bool)
        hint = " (write it in quotes)" if number else ""
        raise ValueError(f"expected {EXAMPLE} (HOST:PORT), found {describe(value)}{hint}")
    text = value.strip()
    if _digits(text):
        return ListenAddress(LOOPBACK, _port(text, value))
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"expected [IPv6 address]:PORT such as [::1]:9400, found {value!r}")
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(f"expected {EXAMPLE} (HOST:PORT), found {value!r}: no port")
        if not host:
            raise ValueError(
                f"{value!r} names no host: write 127.0.0.1{text} for this machine only, or "
                f"0.0.0.0{text} for every interface (gpudesk does not guess which)"
            )
    return ListenAddress(_host(host, value), _port(port, value))


def check_metrics_listen(value: Any) -> str | None:
    """The `[station] metrics_listen` check: the canonical "HOST:PORT", None for off (None on
    the wire, "off" in a profile: TOML has no null)."""
    if value is None or (isinstance(value, str) and value.strip() == OFF):
        return None
    return parse_listen(value).text()


def _host(host: str, value: str) -> str:
    if host == "localhost":
        return LOOPBACK
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        raise ValueError(
            f"{host!r} in {value!r} is no IP address: write 127.0.0.1 (this machine only), "
            "0.0.0.0 (every interface) or one of the machine's addresses; host names other "
            "than localhost are not resolved"
        ) from None


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5


def _port(port: str, value: str) -> int:
    if not _digits(port) or int(port) > 65535:
        raise ValueError(
            f"the port in {value!r} must be a whole number from 1 to 65535 (0: any free port)"
        )
    return int(port)


def bind_problem(address: ListenAddress, exc: OSError, retry_s: float) -> str:
    """Why `address` could not be bound, in words, and what to do about it (the engine tries
    again every `retry_s`)."""
    setting = "[station] metrics_listen"
    if exc.errno == errno.EADDRINUSE:
        dcgm = " (dcgm-exporter's default port)" if address.port == 9400 else ""
        return (
            f"port {address.port} is in use by another program{dcgm}; the engine runs on "
            f"without metrics, tries again every {retry_s:g} s, and {setting} may name "
            "another port"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{address.host} is no address of this machine; fix {setting}"
    if exc.errno == errno.EACCES:
        return (
            f"port {address.port} is below 1024, which only root may listen on; "
            f"choose a port from 1024 up in {setting}"
        )
    return f"{exc.strerror or exc}; check {setting}"
