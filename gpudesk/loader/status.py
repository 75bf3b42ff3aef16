"""Ask every producer of this home for its state (for `gpudesk loader status` and the engine), and
what its status says sharing saved (`cpu_saving`: the engine's loader summary)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudesk.loader.protocol import (
    EXITED,
    STEP_MS,
    LoaderError,
    ProducerInfo,
    decode,
    encode,
    final_failure,
    gone,
    read_info,
    recorded_runs,
    stopping_reason,
)
from gpudesk.loader.station_access import info_files, socket_of
from gpudesk.paths import Home
from gpudesk.text import printable

if TYPE_CHECKING:
    import zmq

    from gpudesk.core.wire.station import LoaderStatus

STATUS_TIMEOUT_MS = 1000


def collect(name: str | None = None, home: Home | None = None) -> list[dict[str, Any]]:
    import zmq

    home = home or Home.from_env()
    try:
        files = info_files(home)  # a squatter's folder: UnsafePath, nothing sent
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    for path, owner in files:
        # On a station, each a member's file (root asks too): only a plain file of hers
        info = read_info(path, owner)
        if info is None:
            if (name is None or path.stem == name) and _plain_file_of(path, owner):
                out.append({"name": path.stem, "error": DAMAGED})
            continue  # none yet (a station's dataset whose producer never ran), or not hers
        if name is not None and info.name != name:
            continue
        failed = final_failure(info)
        if failed is not None:
            out.append({"name": info.name, "error": f"its producer failed: {said(failed)}"})
            continue
        if not recorded_runs(info):
            out.append(not_running(info))
            continue
        if info.preparing:
            out.append({"name": info.name, "pid": info.pid, "preparing": said(info.preparing)})
            continue
        stopping = stopping_reason(info)  # it answers no more: its info file says why
        if stopping is not None:
            out.append(stopping_entry(info, stopping))
            continue
        # Where its sockets are is the home's to say, not the file's (a member's, on a station)
        control = home.loader_paths(path.stem)[0]
        if not socket_of(control, owner):
            out.append({"name": info.name, "error": f"{control} is not its socket"})
            continue
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(f"ipc://{control}")
            sock.send(encode("status"))
            out.append(answer(sock, info, path, owner))
        finally:
            sock.close()
    return out


# An info file that read_info takes for none while it is there: not JSON, a field of another
# type than a producer writes (`protocol.ProducerInfo`), or over INFO_MAX_BYTES
DAMAGED = "its info file is there but is not one a producer writes (damaged?): no producer known"


def _plain_file_of(path: Path, owner: int | None) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (owner is None or st.st_uid == owner)


def answer(
    sock: zmq.Socket[bytes], info: ProducerInfo, path: Path, owner: int | None
) -> dict[str, Any]:
    """The producer's status, asked on `sock`, as `collect` lists it. Waited for in STEP_MS
    steps, between which the producer is looked at: one that stops as it is asked (its info
    file says so before its sockets close, and its last moments answer no status) or has
    exited is listed as such at once, not as a producer that "did not answer"."""
    deadline = time.monotonic() + STATUS_TIMEOUT_MS / 1000
    while not sock.poll(STEP_MS):
        why = gone(info, path, owner)
        if why == EXITED:
            return not_running(info)
        if why is not None:
            return stopping_entry(info, why)
        if time.monotonic() >= deadline:
            return {
                "name": info.name,
                "error": f"its producer did not answer within {STATUS_TIMEOUT_MS / 1000:.0f} s",
            }
    try:
        reply = decode(sock.recv())
    except LoaderError as exc:  # on a station a member's producer answers: hers, not a fault
        return {"name": info.name, "error": f"its producer answered no status ({exc})"}
    reply.pop("type", None)
    return reply


def stopping_entry(info: ProducerInfo, why: str) -> dict[str, Any]:
    return {"name": info.name, "pid": info.pid, "stopping": said(why)}


def said(words: object) -> str:
    """What a producer's info file says (why it failed, stops, what it prepares), as the status
    lists it: on a station the file is its owner's to write, and `gpudesk loader status` prints
    it on another member's terminal, so no control character of hers reaches it."""
    return printable(str(words))


def not_running(info: ProducerInfo) -> dict[str, Any]:
    return {"name": info.name, "error": f"its producer (pid {info.pid}) is not running"}


def cpu_saving(status: LoaderStatus | None) -> tuple[float | None, float | None, float | None]:
    """What loading cost, what it would have cost had every consumer loaded its own batches
    (the producer's CPU per batch it made, times the batches it handed out), and the
    difference: CPU seconds, None where the producer has not reported or made no batch yet."""
    if status is None:
        return None, None, None
    if not status.produced:
        return status.cpu_s, None, None
    unshared = status.cpu_s * status.delivered_total / status.produced
    return round(status.cpu_s, 2), round(unshared, 2), round(unshared - status.cpu_s, 2)
