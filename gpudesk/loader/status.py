"""Ask every producer of this home for its state (for `gpudesk loader status` and the engine)."""

from __future__ import annotations

from typing import Any

from gpudesk.loader.protocol import decode, encode, final_failure, process_alive, read_info
from gpudesk.paths import Home

STATUS_TIMEOUT_MS = 1000


def collect(name: str | None = None, home: Home | None = None) -> list[dict[str, Any]]:
    import zmq

    home = home or Home.from_env()
    try:
        folder = home.checked_loader_dir()  # a squatter's folder: UnsafePath, nothing sent
    except FileNotFoundError:
        return []
    out = []
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    for path in sorted(folder.glob("*.json")):
        info = read_info(path)
        if info is None or (name is not None and info.get("name") != name):
            continue
        failed = final_failure(info)
        if failed is not None:
            out.append({"name": info.get("name"), "error": f"its producer failed: {failed}"})
            continue
        if not process_alive(int(info.get("pid", 0)), info.get("create_time")):
            out.append(
                {
                    "name": info.get("name"),
                    "error": f"its producer (pid {info.get('pid')}) is not running",
                }
            )
            continue
        if info.get("preparing"):
            out.append(
                {"name": info.get("name"), "pid": info.get("pid"), "preparing": info["preparing"]}
            )
            continue
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(info["control"])
            sock.send(encode("status"))
            if sock.poll(STATUS_TIMEOUT_MS):
                reply = decode(sock.recv())
                reply.pop("type", None)
                out.append(reply)
            else:
                out.append(
                    {
                        "name": info.get("name"),
                        "error": "its producer did not answer "
                        f"within {STATUS_TIMEOUT_MS / 1000:.0f} s",
                    }
                )
        finally:
            sock.close()
    return out
