"""A client of the engine's control socket that needs nothing but Python's standard library, so
a throwaway test user (who cannot read the project's virtual environment under root's home) can
run it with the system's python3:

    python3 raw_client.py SOCKET OP '{"args": ...}'

Prints the engine's reply (JSON) on one line, or `{"connect_error": "<errno name>", "message": ...}`
when the socket refused the connection. The engine learns who runs it from the kernel."""

from __future__ import annotations

import errno
import json
import socket
import struct
import sys

HEADER = struct.Struct(">I")


def exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise SystemExit("the engine closed the connection")
        data += chunk
    return data


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
    body = json.dumps({"v": 1, "id": 1, "op": op, "args": args}).encode()
    sock.sendall(HEADER.pack(len(body)) + body)
    (length,) = HEADER.unpack(exactly(sock, HEADER.size))
    print(exactly(sock, length).decode())


if __name__ == "__main__":
    main()
