"""One scheduling pass with MIG repartitioning, as the engine runs it (engine.scheduler) and the
simulator replays it (policy.simulator): the one home of the order of its steps, so what
`gpudesk simulate --mig-repartition` judges is what the engine does.

1. The policy places the queue.
2. If no idle MIG-mode GPU may get a new layout (`relayable`), the placements start; done.
3. Otherwise the placements elsewhere start now, and the jobs still waiting (those the policy
   put on these GPUs among them) weigh a new layout (`repartition`).
4. If a layout changed, the policy places again on the GPUs as they are after it; if not, its
   placements on those GPUs start as decided.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gpudesk.policy.policy import Decision


def schedule_pass(
    decision: Decision,
    relayable: set[int],
    commit: Callable[[Decision], None],
    repartition: Callable[[set[int]], bool],
    place_again: Callable[[], Decision],
) -> None:
    """`decision`: the policy's placements for the station as it is; `relayable`: the idle
    MIG-mode GPUs that may be re-carved now; `commit` starts placements (and records
    rejections and overtakes); `repartition` weighs those GPUs and says whether one changed;
    `place_again` asks the policy about the station as it is after that."""
    if not relayable:
        commit(decision)
        return
    elsewhere = [p for p in decision.placements if not relayable.intersection(p.gpus)]
    held_back = [p for p in decision.placements if relayable.intersection(p.gpus)]
    commit(msgspec.structs.replace(decision, placements=elsewhere))
    if repartition(relayable):
        commit(place_again())
    elif held_back:
        commit(Decision(held_back))
