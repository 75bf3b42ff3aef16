"""A producer's welcome, and each batch message after it, is checked whole before a consumer uses
it: on a station the producer is its owner's process and the consumers are the other members'
jobs, so one of another shape is a LoaderError saying so, not a traceback in their job (it was a
KeyError, a ValueError or a TypeError)."""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
import zmq

from gpudesk.hw import process_start
from gpudesk.loader import LoaderError, SharedLoader
from gpudesk.loader.batch import BatchMeta, Piece, pack, samples
from gpudesk.loader.batch_check import checked_meta
from gpudesk.loader.protocol import ProducerInfo, write_info
from gpudesk.loader.ring import Ring
from gpudesk.loader.slots import SlotTable
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


def packed_in_slot_0(ring: Ring, batch: list[Any]) -> BatchMeta:
    """`batch` laid into slot 0 of `ring` as a producer's worker lays it (`pack`), placed."""
    table = SlotTable(ring, 2, batch_size=len(batch))
    regions = table.request_regions(0)

    def place(field: int, nbytes: int) -> tuple[int, torch.Tensor] | None:
        if field >= len(regions) or nbytes > regions[field][1]:
            return None
        return regions[field][0], ring.view(regions[field][0], nbytes)

    return table.place(0, pack((0, 0), batch, list(range(len(batch))), place))


def valid_batch() -> tuple[Ring, dict[str, Any]]:
    """A real ring holding one batch of 8 samples in slot 0, and the message announcing it."""
    ring = Ring.create("stand-in")
    meta = packed_in_slot_0(ring, [(torch.full((3,), float(i)), i) for i in range(8)])
    return ring, {"type": "batch", "slot": 0, "key": [0, 0], "meta": meta.to_wire()}


def field_changed(message: dict[str, Any], field: int, at: int, value: object) -> dict[str, Any]:
    meta = json.loads(json.dumps(message["meta"]))
    meta[2][field][at] = value
    return {**message, "meta": meta}


BAD_BATCHES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "valid": lambda m: m,
    "slot as text": lambda m: {**m, "slot": "0"},
    "a key of one number": lambda m: {**m, "key": [0]},
    "no description": lambda m: {k: v for k, v in m.items() if k != "meta"},
    "bytes its shape does not hold": lambda m: field_changed(m, 0, 5, 10**9),
    "a dtype that is not one": lambda m: field_changed(m, 0, 1, "load"),
    "a negative offset": lambda m: field_changed(m, 0, 2, -64),
    "a structure naming field 9": lambda m: {**m, "meta": [8, ["tuple", [0, 9]], m["meta"][2]]},
    "a structure nested past any sample": lambda m: {
        **m,
        "meta": [8, functools.reduce(lambda s, _: ["list", [s]], range(100), 0), m["meta"][2]],
    },
    "an offset not aligned for its dtype": lambda m: field_changed(m, 0, 2, m["meta"][2][0][2] + 2),
    "numbers of a tensor's dtype": lambda m: field_changed(m, 1, 1, "float32"),
    "a quantized dtype": lambda m: field_changed(m, 0, 1, "qint8"),
    "a field the structure never names": lambda m: {
        **m,
        "meta": [8, m["meta"][1], [m["meta"][2][0], *m["meta"][2]]],
    },
    "a count past any number": lambda m: {**m, "meta": [float("inf"), *m["meta"][1:]]},
}


@pytest.mark.parametrize("case", BAD_BATCHES)
def test_a_batch_message_of_another_shape_is_a_loader_error(
    stand_in: tuple[Home, zmq.Socket[bytes]], case: str
) -> None:
    """The producer's batch messages are checked as its welcome is: a member's producer could
    send what it liked, and one that does not add up ended the consumer with a KeyError, a
    ValueError or a TypeError (or had it read past the batch)."""
    home, sock = stand_in
    ring, message = valid_batch()
    _, fd_path, _ = home.loader_paths(NAME)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(fd_path))
    server.listen(1)
    welcome = {
        "pid": os.getpid(), "fd_socket": str(fd_path), "epoch": 0, "batches_per_epoch": 1,
        "dataset_len": 8, "batch_size": 8,
    }  # fmt: skip

    def produce() -> None:
        if sock.poll(30_000):
            ident, _hello = sock.recv_multipart()
            sock.send_multipart([ident, json.dumps({"type": "welcome", **welcome}).encode()])
            conn, _ = server.accept()
            with conn:
                socket.send_fds(conn, [b"ring"], [ring.reader_fd])
            sock.send_multipart([ident, json.dumps(BAD_BATCHES[case](message)).encode()])

    producing = threading.Thread(target=produce)
    producing.start()
    try:
        with SharedLoader(NAME, fallback=False, with_ids=True, home=home.root) as loader:
            if case == "valid":
                (features, _labels), ids = next(iter(loader))
                assert ids.tolist() == list(range(8)) and features[:, 0].tolist() == list(range(8))
            else:
                with pytest.raises(LoaderError) as raised:
                    next(iter(loader))
                said = str(raised.value)
                assert f"the producer for {NAME!r} (pid {os.getpid()}) sent a batch" in said, said
    finally:
        producing.join()
        server.close()
        ring.close()


SAMPLES: dict[str, list[Any]] = {
    "tensors, numbers and text": [
        {"x": torch.full((2, 3), float(i)), "n": i, "f": i / 2, "b": i % 2 == 0, "s": "é" * i}
        for i in range(6)
    ],
    "int dict keys": [{0: torch.tensor([i]), 1: i} for i in range(6)],
    "ragged tensors": [torch.arange(i) for i in range(6)],
    "NumPy arrays, nested": [
        (np.full((2,), i, np.uint16), [np.array([i], np.float32)]) for i in range(6)
    ],
    "bfloat16 and complex": [
        (torch.ones(2, dtype=torch.bfloat16), torch.ones(1, dtype=torch.complex64))
        for _ in range(6)
    ],
    "empty tensors and strings": [(torch.empty(0), "") for _ in range(6)],
}


@pytest.mark.parametrize("kind", SAMPLES)
def test_every_batch_a_producer_packs_passes_the_check_and_reads_back(kind: str) -> None:
    """The check refuses nothing `pack` makes (a refused batch would end a job for nothing)."""
    ring = Ring.create("packed")
    try:
        packed = packed_in_slot_0(ring, SAMPLES[kind])
        meta = checked_meta(json.loads(json.dumps(packed.to_wire())))
        assert meta == BatchMeta.from_wire(packed.to_wire())
        assert ring.base is not None
        assert len(samples(ring.base, [(Piece(0, meta, 0, 6, 0), 0, 6)])) == 6
    finally:
        ring.close()
