"""SGD and Adam for the bundled workloads and the selection pre-passes, computed by torch's own
functional optimizers (`torch.optim.sgd.sgd`, `torch.optim.adam.adam`), without the import of
`torch._dynamo` that building any `torch.optim.Optimizer` pays.

Why: torch's optimizer classes wrap their methods in `torch._disable_dynamo`, whose first call
imports `torch._dynamo` — on the 2-core CI VM (2026-12-01) ~2.5 s of CPU, more than `import torch`
itself (~2 s), in every training process: each quickstart job, each pre-pass's proxy model. The
functional calls below are what those classes' `step()` runs (the same kernels, the same
defaults: no foreach on CPU tensors, foreach on CUDA ones), so a step here changes the
parameters exactly as the class's would (`tests/workloads/test_optimizers.py` checks it bit for
bit), and `state_dict()` has the classes' layout, so a checkpoint either wrote loads in the other.

A user's own script uses `torch.optim` as usual; this is only the workloads' and the pre-passes'.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch


class Optimizer(Protocol):
    """What the workloads' training loops and checkpoints use of an optimizer (a
    `torch.optim.Optimizer` is one too)."""

    param_groups: list[dict[str, Any]]

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def step(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class _Functional:
    """One parameter group, its per-parameter state keyed by position (as the classes'
    `state_dict()` keys it)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], hyper: dict[str, Any]) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("an optimizer needs at least one parameter")
        self.param_groups = [dict(hyper)]
        self.state: dict[int, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    def with_grads(self) -> Iterator[tuple[int, torch.nn.Parameter]]:
        return ((i, p) for i, p in enumerate(self.params) if p.grad is not None)

    def state_dict(self) -> dict[str, Any]:
        group = {**self.param_groups[0], "params": list(range(len(self.params)))}
        return {
            "state": {i: dict(s) for i, s in self.state.items()},
            "param_groups": [group],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        import torch

        (group,) = state_dict["param_groups"]
        if len(group["params"]) != len(self.params):
            raise ValueError(
                f"the checkpoint's optimizer has {len(group['params'])} parameters, "
                f"this model {len(self.params)}"
            )
        self.param_groups = [{k: v for k, v in group.items() if k != "params"}]
        self.state = {}
        for key, saved in state_dict["state"].items():
            i = group["params"].index(key)  # a state's key is its parameter's id in the group
            p = self.params[i]
            self.state[i] = {
                # as torch's load_state_dict casts: moments to the parameter's dtype and
                # device, Adam's step count stays a float32 CPU tensor
                name: value
                if name == "step"
                else (value.to(dtype=p.dtype, device=p.device) if torch.is_tensor(value) else value)
                for name, value in saved.items()
            }


class SGD(_Functional):
    """`torch.optim.SGD(params, lr, momentum, weight_decay)`'s steps."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            params,
            {
                "lr": lr,
                "momentum": momentum,
                "dampening": 0.0,
                "weight_decay": weight_decay,
                "nesterov": False,
                "maximize": False,
            },
        )

    def step(self) -> None:
        import torch
        from torch.optim.sgd import sgd

        group = self.param_groups[0]
        chosen = list(self.with_grads())
        buffers: list[torch.Tensor | None] = [
            self.state.get(i, {}).get("momentum_buffer") for i, _ in chosen
        ]
        with torch.no_grad():
            sgd(
                [p for _, p in chosen],
                [p.grad for _, p in chosen],  # type: ignore[misc]
                buffers,
                weight_decay=group["weight_decay"],
                momentum=group["momentum"],
                lr=group["lr"],
                dampening=group["dampening"],
                nesterov=group["nesterov"],
                maximize=group["maximize"],
            )
        if group["momentum"] != 0:
            for (i, _), buffer in zip(chosen, buffers, strict=True):
                if buffer is not None:
                    self.state[i] = {"momentum_buffer": buffer}


class Adam(_Functional):
    """`torch.optim.Adam(params, lr, betas, eps)`'s steps (no weight decay, no amsgrad)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(
            params,
            {
                "lr": lr,
                "betas": betas,
                "eps": eps,
                "weight_decay": 0.0,
                "amsgrad": False,
                "maximize": False,
            },
        )

    def step(self) -> None:
        import torch
        from torch.optim.adam import adam

        group = self.param_groups[0]
        chosen = list(self.with_grads())
        for i, p in chosen:
            if i not in self.state:
                # as the class starts a parameter's state: a CPU step count (not capturable,
                # not fused) and zeroed moments like the parameter
                self.state[i] = {
                    "step": torch.tensor(0.0, dtype=_scalar_dtype()),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        states = [self.state[i] for i, _ in chosen]
        beta1, beta2 = group["betas"]
        with torch.no_grad():
            adam(
                [p for _, p in chosen],
                [p.grad for _, p in chosen],  # type: ignore[misc]
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [],
                [s["step"] for s in states],
                amsgrad=False,
                beta1=beta1,
                beta2=beta2,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=group["maximize"],
            )

    def moments(self, param_index: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(exp_avg, exp_avg_sq) of the parameter at `param_index`; None before its first step."""
        state = self.state.get(param_index)
        return None if state is None else (state["exp_avg"], state["exp_avg_sq"])


def _scalar_dtype() -> torch.dtype:
    """The dtype torch's Adam counts its steps in (`torch.optim.optimizer._get_scalar_dtype`)."""
    import torch

    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
