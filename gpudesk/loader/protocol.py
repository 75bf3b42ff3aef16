"""What producer and consumers say to each other, and where they find each other.

Control goes over a pyzmq ROUTER (producer) / DEALER (consumer) pair on an ipc:// socket in the
home's 0700 socket folder; the ring's file descriptor over a Unix socket beside it. Messages are
small JSON objects with a `type`; batch data never travels here.

consumer -> producer
    hello    {pid, batch_size, resume: {epoch, received: {epoch: [batch, ...]}} | null}
    release  {slots: [slot, ...]}      the consumer is done with these slots
    path     {path}                    where it reads batches: "staged" or "host: why"
    bye      {}                        leaving (its slots are released)
    status   {}                        any client: the producer's view, for `loader status`
producer -> consumer
    welcome  {layout, epoch, batches_per_epoch, dataset_len, pid, fd_socket, makeups,
              lease: the slots it lends this consumer at most (lease.py),
              staging: a mirror handle | null, staging_off: why not | null}   (staging.py)
    batch    {slot, n, key: [epoch, batch], t: send time (time.time()),
              gen: the mirror generation it is staged in (absent: host only),
              mirror: the mirror's new handle, when it grew since this consumer's}
    refused  {message, stopping}       hello could not be accepted (the reason, for the user);
                                       stopping: true where the producer stops (handshake.py)
    bye      {message}                 the producer is stopping
    status   {...}
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Annotated, Any, Protocol

import msgspec

from gpudesk.core.datasets import NAME
from gpudesk.hw import boottime, process_start
from gpudesk.loader.restarts import RestartNote
from gpudesk.text import printable_line

ENV_RESUME_S = "GPUDESK_LOADER_RESUME_S"  # how long a consumer waits for a restarted producer
ENV_DATASET = "GPUDESK_DATASET"  # set by the engine: the dataset whose producer it started
# `gpudesk loader serve`'s exit status when it failed for good: its settings cannot work (its
# sockets' path is too long, the dataset's factory cannot be imported or fails, an option is
# invalid), so starting it again would fail again. Its info file says why (`final_failure`).
EXIT_FINAL = 4


class LoaderError(RuntimeError):
    """A shared loader cannot go on; the message says why and what to do."""


class FinalError(LoaderError):
    """A producer cannot start with these settings, however often it is tried (not transient)."""


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise LoaderError(
            f"'{printable_line(str(name))}' is not a loader name: use 1 to 40 letters, digits, "
            "'_', '.' or '-', starting with a letter or digit"
        )
    return name


def encode(kind: str, **fields: Any) -> bytes:
    return json.dumps({"type": kind, **fields}, separators=(",", ":")).encode()


def decode(raw: bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # a producer's `[[[[…` nested past the stack
        raise LoaderError(f"a malformed loader message ({exc})") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise LoaderError("a loader message without a type")
    return message


# while waiting for a producer's answer (to a hello, to a status request), it is looked at this
# often (`gone`): a producer that stops answers nothing more
STEP_MS = 200
# Linux's PID_MAX_LIMIT on 64-bit machines (include/linux/threads.h: 4 * 1024 * 1024): no pid is
# larger, so an info file naming one is damaged, or a member's as she liked
PID_MAX_LIMIT = 4 * 1024 * 1024
INFO_MAX_BYTES = 1 << 20  # an info file is ~1 KiB; more is not one (assumption: 1000x margin)


class ProducerInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A producer's info file (producer_info.py writes it), and the engine's word beside it
    (`station_access.engines_word`: `not_started`, `given_up`, `restarting`). Every field may be
    absent: an older producer wrote fewer (`create_time` for `started`); a field these do not
    name (a newer producer's) is passed over. A field of another type than these makes the
    file no info at all (`read_info`): on a station its owner writes it, and root believes
    nothing of it then."""

    name: str | None = None
    pid: Annotated[int, msgspec.Meta(ge=0, le=PID_MAX_LIMIT)] = 0  # its process (0: none named)
    started: float | None = None  # its start, as process_start.started() gives it
    create_time: float | None = None  # an earlier gpudesk's start (psutil's create_time())
    boot_id: str | None = None  # the boot it started in: in another, it runs no more
    control: str | None = None  # its control socket's address (ipc://...)
    fd_socket: str | None = None  # where its ring's descriptor is handed out
    identity: dict[str, Any] | None = None  # what a restarted producer must match to go on
    stream_next: tuple[int, int] | None = None  # (epoch, batch): where its stream goes on
    managed: bool = False  # the engine started it
    started_at: float | None = None  # wall clock
    # its engine is gone: a LoaderOrphan's fields (`orphan.orphan_of` reads them), not checked
    # here, so that a newer producer's field in it does not make the whole file no info
    orphaned: dict[str, Any] | None = None
    preparing: str | None = None  # what it prepares before it serves (a selection's pre-pass)
    stopping: str | None = None  # why it stops (said before its sockets close)
    failed: str | None = None  # why it failed
    transient: bool | None = None  # False: for good (`final_failure`)
    failed_at: float | None = None
    not_started: bool = False  # the engine's word: it did not start it (or gave it up)
    given_up: bool = False  # ... and starts it no more until its dataset is registered again
    restarting: RestartNote | None = None  # the engine's word: it restarts it


def read_info(path: Path, owner_uid: int | None = None) -> ProducerInfo | None:
    """A producer's info file, or None when there is none (or it is being replaced, is not a
    plain file, or is not a ProducerInfo). Opened as untrusted (`gpudesk.untrusted`): a link is
    not followed, a FIFO does not block, a file over INFO_MAX_BYTES is no info; `owner_uid`:
    only a file of that user (a system engine's root reading a producer's run as a member,
    loader/station_access.py)."""
    from gpudesk.untrusted import read_untrusted

    try:  # Python's JSON, as `info_json` writes it: a name or reason that is not UTF-8 escaped
        return msgspec.convert(
            json.loads(read_untrusted(path, owner_uid, INFO_MAX_BYTES)), ProducerInfo
        )
    except (OSError, ValueError, RecursionError, msgspec.ValidationError):
        return None  # not JSON, nested past the stack, or not of this shape


def info_json(info: ProducerInfo, indent: int | None = None) -> str:
    """An info file's text. Python's JSON, not msgspec's: a text from outside (a dataset's
    argument, a factory's exception) that is not UTF-8 is escaped (\\udcff), not an error."""
    return json.dumps(msgspec.to_builtins(info), indent=indent)


def write_info(path: Path, info: ProducerInfo) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(info_json(info, indent=1))
    os.replace(tmp, path)


def final_failure(info: ProducerInfo | None) -> str | None:
    """Why the producer whose info file this is failed for good, or None when it did not: a
    producer that cannot start with its settings leaves its reason there (`failed`, with
    `transient: false`) for its consumers and the engine, which then wait for it no longer."""
    if info is None or info.transient is not False:
        return None
    return info.failed or None


def stopping_reason(info: ProducerInfo | None) -> str | None:
    """Why the producer whose info file this is stops, or None when it does not: a producer
    says so (`stopping`) as it begins to, before its sockets close (producer_info.say_stopping),
    for the consumers that found it a moment before. An info file without it (one of a producer
    older than the field) serves."""
    return (info.stopping or None) if info is not None else None


def clear_failure(path: Path) -> None:
    """Forget a failed producer's reason before starting it again. The file goes (unlinked: a
    link put there is removed, never followed), and the stream position it kept with it: the
    successor starts its stream afresh, and moves it to where consumers that resume are."""
    if final_failure(read_info(path)) is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def receive_fd(path: Path, timeout: float = 5.0) -> int:
    """The ring's file descriptor, from the producer's descriptor socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        msg, fds, _flags, _addr = socket.recv_fds(sock, 1024, 1)
    if not fds:  # a refusal says why (loader/station_access.py), shown as one line
        why = msg.decode(errors="replace").strip() or "it sent no shared-memory descriptor"
        raise LoaderError(f"the producer at {path} refused: {why}")
    return fds[0]


def process_alive(pid: int, started: object = None) -> bool:
    """True while the process runs (a zombie, or a new process with its pid, does not count):
    `started` is its start as gpudesk.hw.process_start.started() gave it, in this boot."""
    return process_start.runs(pid, started)


def this_process(**fields: Any) -> ProducerInfo:
    """This process as an info file names it: its pid, its start and the boot it is in, with
    `fields` (ProducerInfo's)."""
    pid = os.getpid()
    started = process_start.started(pid)
    return ProducerInfo(pid=pid, started=started, boot_id=boottime.boot_id(), **fields)


def recorded_pid(info: ProducerInfo) -> int:
    """The pid an info file names; 0 where it names none. On a station its owner may write
    any pid there: root believes it only as `station_access.believed_pid` says."""
    return info.pid


class Started(Protocol):
    """What names a producer's start: its info file (ProducerInfo) or its welcome (Welcome)."""

    @property
    def started(self) -> float | None: ...

    @property
    def create_time(self) -> float | None: ...


def recorded_start(info: Started) -> float | None:
    """The start an info file or a welcome gives its process: `started`, or `create_time` from
    a producer of an earlier gpudesk (process_start reads both forms)."""
    return info.started if info.started is not None else info.create_time


def recorded_runs(info: ProducerInfo) -> bool:
    """True while the process an info file names (this_process(), or the older `create_time`)
    runs; in another boot than the one it was recorded in, none does."""
    if info.boot_id is not None and info.boot_id != boottime.boot_id():
        return False
    return process_alive(recorded_pid(info), recorded_start(info))


EXITED = "it has exited"  # `gone`'s word for a producer no longer running


def gone(info: ProducerInfo, info_path: Path, owner_uid: int | None = None) -> str | None:
    """Why the producer `info` describes will not answer (it has exited, or it stops, saying
    why in its info file, of `owner_uid` where given); None while it is there to serve. Asked
    between short waits by whoever waits for its answer (a consumer's hello, a status request),
    which then learns at once instead of at the end of its timeout."""
    pid = recorded_pid(info)
    if not recorded_runs(info):
        return EXITED
    now = read_info(info_path, owner_uid)
    return stopping_reason(now) if now is not None and now.pid == pid else None
