"""A data-parallel training job reading a shared loader, for tests/loader/test_loader_contract.py.

    python ddp_job.py NAME --out FILE --rank R --world W --store PATH [--batch-size B]
                      [--epochs E] [--loader-delay S] [--loader-after FILE]

Rank R of W joins a gloo process group (a FileStore at PATH; W = 1 runs without one), makes
`SharedLoader(NAME, with_ids=True)` (no shard given: it is taken from torch.distributed) and
trains a DDP-wrapped linear model on it for E epochs: every step all-reduces the gradients, so
the ranks step in lockstep as a real job's do. --loader-delay: this rank makes its loader S
seconds late (the others wait for it in their loader's start, a collective call); --loader-after:
once FILE exists (the test makes it when what it waits for has happened). Each epoch's
ids, the producer's epoch they are of, whether every sample's bytes were its id's and the
epochs the ranks were welcomed at and agreed on go to FILE as one JSON line per epoch.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--loader-delay", type=float, default=0.0)
    parser.add_argument("--loader-after", default=None)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gpudesk.loader import SharedLoader

    if args.world > 1:
        store = dist.FileStore(args.store, args.world)
        dist.init_process_group(
            "gloo", store=store, rank=args.rank, world_size=args.world,
            timeout=timedelta(seconds=60),
        )  # fmt: skip
    model: torch.nn.Module = torch.nn.Linear(2, 1)
    if args.world > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    time.sleep(args.loader_delay)  # a rank that makes its loader late (the others wait for it)
    if args.loader_after is not None:
        from pathlib import Path

        deadline = time.monotonic() + 120
        while not Path(args.loader_after).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    loader = SharedLoader(args.name, batch_size=args.batch_size, with_ids=True, fallback=False)
    with open(args.out, "w") as out:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            stream_epoch = loader.epoch
            ids: list[int] = []
            ok = True
            steps = 0
            for (features, labels), batch_ids in loader:
                ok = ok and torch.equal(labels, batch_ids)
                ok = ok and bool((features == batch_ids.float().view(-1, 1)).all())
                ids += batch_ids.tolist()
                loss = (model(features) - labels.float().view(-1, 1)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()  # DDP: all-reduced across the ranks, every step
                optimizer.step()
                steps += 1
            record = {
                "epoch": epoch,
                "stream_epoch": stream_epoch,
                "ids": ids,
                "ok": ok,
                "steps": steps,
                "len": len(loader),
                "joined": loader.contract.joined,
                "shard": list(vars(loader.contract.shard).values())
                if loader.contract.shard
                else None,
            }
            out.write(json.dumps(record) + "\n")
            out.flush()
    loader.close()
    if args.world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from gpudesk.quick_exit import run_and_leave  # torch not torn down: ~0.4 CPU-s

    run_and_leave(main)
