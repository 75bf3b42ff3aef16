"""What a consumer pays to read each batch through a private mapping (ring.py).

Before, a consumer read every batch through one shared writable mapping of the ring: a script
that changed its batch in place changed the ring, i.e. the batch every other job read. Now it
reads through a private (copy-on-write) mapping, checked before each batch for pages this
process wrote (/proc/self/pagemap), and mapped anew when it has. This measures the consumer's
CPU per batch, in one process, side by side, on the same ring (8 slots, reused round robin):

- shared: a view of one long-lived shared mapping (what consumers did before);
- private: `Ring.batch_base`, the private mapping checked and reused while clean (what they do);
- fresh: a new private mapping every batch (what they do where /proc/self/pagemap cannot be
  read; and what a first version of the change did);
- private + written: `batch_base` with the script changing the whole batch in place (its
  copy-on-write faults, and a fresh mapping for the next batch: a cost only such a script
  pays, where a DataLoader's collate would have copied the batch up front).

Each reads the batch whole (`sum`), as training reads it. Prints one JSON line per batch size.

    python bench/loader_private_mapping.py [--batches 200] [--sizes-mb 0.4,4.8,19,38]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from gpudesk.loader.ring import Ring

SLOTS = 8


def per_batch_ms(
    consumer: Ring, shared: torch.Tensor, offsets: list[int], nbytes: int, way: str, n: int
) -> float:
    times = []
    for i in range(n):
        offset = offsets[i % SLOTS]
        start = time.process_time()
        if way == "shared":
            base = shared
        elif way == "fresh":
            consumer._map(consumer.size)
            assert consumer.base is not None
            base = consumer.base
        else:
            base = consumer.batch_base([(offset, nbytes)])
        batch = base[offset : offset + nbytes].view(torch.float32)
        if way == "private + written":
            batch.add_(1.0)
        float(batch.sum())
        del batch, base
        times.append(time.process_time() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--sizes-mb", default="0.4,4.8,19,38")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for size_mb in (float(s) for s in args.sizes_mb.split(",")):
        nbytes = int(size_mb * 2**20) // 4 * 4
        producer = Ring.create("bench")
        offsets = [producer.allocate(nbytes) for _ in range(SLOTS)]
        assert producer.base is not None
        producer.base.view(torch.uint8)[: producer.end].fill_(1)
        consumer = Ring.attach(os.dup(producer.reader_fd))
        consumer.ensure(producer.end)
        ways = ("shared", "private", "fresh", "private + written")
        for way in ways:  # warm: each way's first pass maps the pages once
            per_batch_ms(consumer, producer.base, offsets, nbytes, way, SLOTS)
        result = {
            way: round(per_batch_ms(consumer, producer.base, offsets, nbytes, way, args.batches), 3)
            for way in ways
        }
        print(
            json.dumps(
                {
                    "batch_mb": size_mb,
                    "cpu_ms_per_batch": result,
                    "private_over_shared": round(result["private"] / result["shared"], 3),
                    "fresh_over_shared": round(result["fresh"] / result["shared"], 3),
                    "machine": f"{platform.node()} {os.cpu_count()} cores",
                    "kernel": platform.release(),
                }
            )
        )
        consumer.close()
        producer.close()


if __name__ == "__main__":
    from quiet_pipe import run_main

    run_main(main)
