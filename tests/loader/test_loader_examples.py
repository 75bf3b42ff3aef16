"""The examples of docs/loader.md ("DataLoader's options", Examples) run as they are written:
each code block marked `<!-- example: NAME -->` is taken from the document and run as a script
of its own, with a real producer (`gpudesk loader serve`) and, the plain loop, without one.
Lightning and Accelerate are optional (`pip install 'gpudesk[frameworks]'`): their examples are
skipped with the reason where they are not installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_loader import Loaders

from gpudesk.paths import Home

DOC = Path(__file__).resolve().parents[2] / "docs" / "loader.md"
EPOCH = 192  # 200 samples in batches of 16, drop_last: 12 full batches


def example(name: str) -> str:
    found = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```\n", DOC.read_text(), re.S)
    assert found, f"docs/loader.md has no example {name!r}"
    return found.group(1)


@pytest.fixture
def loaders(home: Home, tmp_path: Path) -> Iterator[Loaders]:
    launcher = Loaders(home, tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def run(name: str, where: Path, home: Path) -> str:
    """Run the example in `where` (its checkpoints land there); its output."""
    where.mkdir(exist_ok=True)
    script = where / f"example_{name}.py"  # not lightning.py: it would shadow the package
    script.write_text(example(name))
    env = {**os.environ, "GPUDESK_HOME": str(home)}
    env.pop("RANK", None)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def serve(loaders: Loaders) -> None:
    # subprocesses importing torch and a framework on a busy machine: more than the default 30 s
    loaders.serve("synthetic", size=200, batch=16, shape=(1,), idle_exit=300)


@pytest.mark.parametrize("producer", [True, False], ids=["producer", "fallback"])
def test_plain_loop_and_its_resume(
    loaders: Loaders, home: Home, tmp_path: Path, producer: bool
) -> None:
    if producer:
        serve(loaders)
    mode = "shared" if producer else "local"
    where = tmp_path / "job"
    out = run("plain", where, home.root)
    assert out.splitlines() == [
        f"epoch 0: {EPOCH} samples ({mode})",
        f"epoch 1: {EPOCH} samples ({mode})",
    ]
    # Run again: it resumes from its last checkpoint, after step 9 of epoch 1 (of 12 steps):
    # only the last 2 batches of that epoch are left.
    assert run("plain", where, home.root).splitlines() == [f"epoch 1: 32 samples ({mode})"]


def test_lightning(loaders: Loaders, home: Home, tmp_path: Path) -> None:
    pytest.importorskip("lightning", reason="Lightning is optional: gpudesk[frameworks]")
    serve(loaders)
    out = run("lightning", tmp_path / "job", home.root)
    assert f"lightning: {2 * EPOCH} samples in 2 epochs" in out


def test_accelerate(loaders: Loaders, home: Home, tmp_path: Path) -> None:
    pytest.importorskip("accelerate", reason="Accelerate is optional: gpudesk[frameworks]")
    serve(loaders)
    out = run("accelerate", tmp_path / "job", home.root)
    assert f"accelerate: {2 * EPOCH} samples" in out
    assert (tmp_path / "job" / "accelerate-state").is_dir()


LIGHTNING_RESUME = """
import json, sys
import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from gpudesk.loader import SharedLoader

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ids = []
    def training_step(self, batch, batch_idx):
        (x, y), ids = batch
        assert torch.equal(x[:, 0], ids.float())
        self.ids += ids.tolist()
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y.float())
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-4)
    def train_dataloader(self):
        return SharedLoader("synthetic", batch_size=16, with_ids=True, fallback=False)

resume = sys.argv[1] if len(sys.argv) > 1 else None
model = Model()
trainer = L.Trainer(
    max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
    enable_model_summary=False, max_steps=-1 if resume else 5,
    callbacks=[ModelCheckpoint(dirpath="ckpt", every_n_train_steps=5, save_top_k=-1)],
)
trainer.fit(model, ckpt_path=resume)
print(json.dumps(model.ids))
"""


def test_lightning_resumes_mid_epoch_from_its_checkpoint(
    loaders: Loaders, home: Home, tmp_path: Path
) -> None:
    """Lightning saves the loader's state_dict in its checkpoint (it is a stateful iterable)
    and restores it: a run stopped after 5 steps and resumed from that checkpoint reads exactly
    the rest of the epoch."""
    pytest.importorskip("lightning", reason="Lightning is optional: gpudesk[frameworks]")
    serve(loaders)
    where = tmp_path / "job"
    where.mkdir()
    script = where / "resume_job.py"
    script.write_text(LIGHTNING_RESUME)
    env = {**os.environ, "GPUDESK_HOME": str(home.root)}

    def fit(*args: str) -> list[int]:
        done = subprocess.run(
            [sys.executable, str(script), *args], cwd=where, env=env, capture_output=True,
            text=True, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        return list(json.loads(done.stdout.strip().splitlines()[-1]))

    first = fit()
    assert len(first) == 5 * 16
    (checkpoint,) = (where / "ckpt").glob("*.ckpt")
    rest = fit(str(checkpoint))
    assert len(rest) == 200 - 5 * 16 and not set(first) & set(rest)
    assert sorted(first + rest) == list(range(200))
