"""A producer's welcome is checked whole before a consumer uses it: on a station the producer is
its owner's process and the consumers are the other members' jobs, so one of another shape is a
LoaderError saying so, not a traceback in their job (it was a KeyError or a ValueError)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import zmq

from gpudesk.hw import process_start
from gpudesk.loader import LoaderError, SharedLoader
from gpudesk.loader.protocol import ProducerInfo, write_info
from gpudesk.paths import Home

NAME = "syn"


@pytest.fixture
def stand_in(home: Home) -> Iterator[tuple[Home, zmq.Socket[bytes]]]:
    """A stand-in producer: a live process named in the info file, the control socket bound."""
    home.ensure()
    home.private_subdir(home.loader_dir)
    control, _, info_path = home.loader_paths(NAME)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    started = process_start.started(proc.pid)
    address = f"ipc://{control}"
    write_info(info_path, ProducerInfo(name=NAME, pid=proc.pid, started=started, control=address))
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(address)
    try:
        yield home, sock
    finally:
        sock.close()
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    "welcome",
    [
        {"pid": "4242", "fd_socket": "/x"},  # no epoch, a pid as text
        {"pid": 4242, "fd_socket": "/x", "epoch": 0, "batches_per_epoch": 4, "dataset_len": 32},
        {"pid": 4242, "fd_socket": 7, "epoch": 0, "batches_per_epoch": 4, "dataset_len": 32,
         "batch_size": 8},
    ],
)  # fmt: skip
def test_a_welcome_of_another_shape_is_a_loader_error(
    stand_in: tuple[Home, zmq.Socket[bytes]], welcome: dict[str, object]
) -> None:
    home, sock = stand_in

    def answer() -> None:
        if sock.poll(30_000):
            ident, _hello = sock.recv_multipart()
            sock.send_multipart([ident, json.dumps({"type": "welcome", **welcome}).encode()])

    answering = threading.Thread(target=answer)
    answering.start()
    try:
        with pytest.raises(LoaderError) as raised:
            SharedLoader(NAME, fallback=False, home=home.root)
    finally:
        answering.join()
    said = str(raised.value)
    assert f"the producer for {NAME!r} sent a welcome this consumer cannot read" in said, said
