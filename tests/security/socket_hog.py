"""A member who hogs the engine's control socket, for the bounds tests and bench/hostile_user.py.
Standard library only: a throwaway user runs it with the system's python3.

    python3 socket_hog.py SOCKET idle N            N connections that never send a thing
    python3 socket_hog.py SOCKET partial N BYTES   N connections, each announcing a BYTES-long
                                                   request and sending all of it but one byte
    python3 socket_hog.py SOCKET subscribe N       N subscribers that never read an event

Once every connection is in place (the engine answered a probe sent after them, so it has
accepted, or turned away, each), prints one JSON line: how many it holds, how many the engine
refused and the distinct reasons it gave, how many it closed without a word. Then holds them
until its stdin closes."""

from __future__ import annotations

import json
import resource
import select
import socket
import struct
import sys
import time

HEADER = struct.Struct(">I")
DEADLINE_S = 120.0


def frame(message: dict[str, object]) -> bytes:
    body = json.dumps(message).encode()
    return HEADER.pack(len(body)) + body


def read_frame(sock: socket.socket, deadline: float) -> bytes | None:
    """One frame, or None when the connection ends first."""
    data = b""
    want = HEADER.size
    length = None
    while len(data) < want:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(want - len(data))
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            return None
        data += chunk
        if length is None and len(data) == HEADER.size:
            (length,) = HEADER.unpack(data)
            want += length
    return data[HEADER.size :]


def main() -> None:
    path, mode, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    deadline = time.monotonic() + DEADLINE_S
    held: list[socket.socket] = []
    refused: list[socket.socket] = []  # the engine closed it: read why below
    answered: dict[socket.socket, bytes | None] = {}
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)  # blocking: waits while the listen backlog is full
            sock.settimeout(DEADLINE_S)
        except OSError:
            sock.close()
            refused.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            continue
        try:
            if mode == "partial":
                sock.sendall(HEADER.pack(size) + b" " * (size - 1))
            elif mode == "subscribe":
                sock.sendall(frame({"v": 1, "id": 0, "op": "subscribe", "args": {"topic": ""}}))
                reply = read_frame(sock, deadline)
                if reply is None or not json.loads(reply).get("ok"):
                    refused.append(sock)
                    answered[sock] = reply  # its refusal, already read
                    continue
        except OSError:
            refused.append(sock)
            continue
        held.append(sock)
    # A probe after them all: once it is answered (or turned away), the engine has acted on each.
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        probe.sendall(frame({"v": 1, "id": 1, "op": "ping", "args": {}}))
        read_frame(probe, deadline)
    except OSError:
        pass
    finally:
        probe.close()
    still: list[socket.socket] = []
    for sock in held:  # anything to read on a held one is the engine's parting word
        poller = select.poll()  # not select(): these descriptors go past 1024
        poller.register(sock, select.POLLIN)
        ready = poller.poll(0)
        (refused if ready and mode != "subscribe" else still).append(sock)
    reasons: dict[str, int] = {}
    silent = 0
    for sock in refused:
        try:
            if sock in answered:
                said = answered[sock]
            else:
                said = read_frame(sock, min(deadline, time.monotonic() + 2.0))
        except OSError:
            said = None
        if said is None:
            silent += 1
        else:
            error = json.loads(said).get("error") or {}
            key = f"{error.get('code')}: {error.get('message')}"
            reasons[key] = reasons.get(key, 0) + 1
        sock.close()
    report = {"held": len(still), "refused": len(refused) - silent, "closed_silently": silent}
    print(json.dumps({**report, "reasons": reasons}), flush=True)
    sys.stdin.read()  # hold them until the caller is done
    for sock in still:
        sock.close()


if __name__ == "__main__":
    main()
