"""gpudesk.optimizers: the workloads' SGD and Adam step exactly as torch.optim's classes do, their
checkpoints load in either, and a training process that uses them never imports torch._dynamo."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gpudesk import optimizers  # noqa: E402


def _model(seed: int) -> Any:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


def _train(model: Any, optimizer: Any, steps: range, frozen_bias: bool = False) -> None:
    for step in steps:
        generator = torch.Generator().manual_seed(step)
        x = torch.randn(8, 6, generator=generator)
        y = torch.randint(0, 3, (8,), generator=generator)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if frozen_bias:  # a parameter with no gradient this step is left alone, state and all
            model[2].bias.grad = None
        optimizer.step()


PAIRS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "sgd": (
        lambda p: optimizers.SGD(p, lr=0.05),
        lambda p: torch.optim.SGD(p, lr=0.05),
    ),
    "sgd-momentum-decay": (
        lambda p: optimizers.SGD(p, lr=0.05, momentum=0.9, weight_decay=5e-4),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=5e-4),
    ),
    "adam": (
        lambda p: optimizers.Adam(p, lr=0.01),
        lambda p: torch.optim.Adam(p, lr=0.01),
    ),
    "adam-betas-eps": (
        lambda p: optimizers.Adam(p, lr=0.003, betas=(0.8, 0.99), eps=1e-6),
        lambda p: torch.optim.Adam(p, lr=0.003, betas=(0.8, 0.99), eps=1e-6),
    ),
}


def _same(a: Any, b: Any) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("kind", sorted(PAIRS))
@pytest.mark.parametrize("frozen_bias", [False, True])
def test_steps_change_the_parameters_bit_for_bit_as_torch_optims_class(
    kind: str, frozen_bias: bool
) -> None:
    ours_of, theirs_of = PAIRS[kind]
    mine, reference = _model(3), _model(3)
    _train(mine, ours_of(mine.parameters()), range(30), frozen_bias)
    _train(reference, theirs_of(reference.parameters()), range(30), frozen_bias)
    assert _same(mine, reference)
    assert not _same(mine, _model(3)), "the steps changed nothing: the check would mean nothing"


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_a_checkpoint_of_either_resumes_in_the_other(kind: str) -> None:
    ours_of, theirs_of = PAIRS[kind]
    straight = _model(5)
    _train(straight, theirs_of(straight.parameters()), range(20))
    # ours for 10 steps, then its state_dict into torch's class for the last 10
    first = _model(5)
    ours = ours_of(first.parameters())
    _train(first, ours, range(10))
    saved = ours.state_dict()
    theirs = theirs_of(first.parameters())
    theirs.load_state_dict(saved)
    _train(first, theirs, range(10, 20))
    assert _same(first, straight)
    # and the other way round
    second = _model(5)
    theirs = theirs_of(second.parameters())
    _train(second, theirs, range(10))
    ours = ours_of(second.parameters())
    ours.load_state_dict(theirs.state_dict())
    _train(second, ours, range(10, 20))
    assert _same(second, straight)


def test_a_checkpoint_for_another_model_is_refused() -> None:
    small = optimizers.Adam(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    big = optimizers.Adam(_model(1).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="has 2 parameters, this model 4"):
        big.load_state_dict(small.state_dict())


def test_a_process_that_trains_with_them_never_imports_torch_dynamo() -> None:
    script = (
        "import sys, torch; from gpudesk import optimizers\n"
        "m = torch.nn.Linear(4, 2)\n"
        "for o in (optimizers.SGD(m.parameters(), lr=0.1, momentum=0.9),"
        " optimizers.Adam(m.parameters(), lr=0.1)):\n"
        "    o.zero_grad(); m(torch.ones(3, 4)).sum().backward(); o.step(); o.state_dict()\n"
        "print('torch._dynamo' in sys.modules)\n"
        "torch.optim.SGD(m.parameters(), lr=0.1)\n"  # the class, for contrast, does import it
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False", "True"]
