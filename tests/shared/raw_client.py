"""A client of the engine's control socket that needs nothing but Python's standard library, so
a throwaway test user (who cannot read the project's virtual environment under root's home) can
run it with the system's python3:

    python3 raw_client.py SOCKET OP '{"args": ...}'

Prints the engine's reply (JSON) on one line, or `{"connect_error": "<errno name>", "message": ...}`
when the socket refused the connection. The engine learns who runs it from the kernel.

Scripts copied next to it (the tests' and bench's pingers) import its framing: Python puts a
script's own folder first on its path."""

from __future__ import annotations

import errno
import json
import socket
import struct
import sys
from typing import Any

HEADER = struct.Struct(">I")


def exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise SystemExit("the engine closed the connection")
        data += chunk
    return data


def request_frame(op: str, args: dict[str, Any], request_id: int = 1) -> bytes:
    """One request as it goes on the wire: its length, then its JSON body."""
    body = json.dumps({"v": 1, "id": request_id, "op": op, "args": args}).encode()
    return HEADER.pack(len(body)) + body


def read_reply(sock: socket.socket) -> bytes:
    """The body of the engine's next reply on `sock`."""
    (length,) = HEADER.unpack(exactly(sock, HEADER.size))
    return exactly(sock, length)


def main() -> None:
    path, op = sys.argv[1], sys.argv[2]
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    try:
        sock.connect(path)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        print(json.dumps({"connect_error": name, "message": str(exc)}))
        return
    sock.sendall(request_frame(op, args))
    print(read_reply(sock).decode())


if __name__ == "__main__":
    main()
