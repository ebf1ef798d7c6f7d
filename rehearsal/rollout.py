"""The rollout's accounting: replicas replaced one at a time, as pure functions.

The model (a Deployment with maxSurge 0, maxUnavailable 1 on a GPU-bound
cluster, the usual case when a fleet fills its quota): the replacement of a
replica can start only once the replica has exited and freed its
accelerators, and serves `start` seconds later; only then is the next replica
deleted. So replica i is deleted at the sum of the (hold + start) before it,
the accelerator-seconds spent holding departing replicas are the sum of the
holds (delete to exit, per accelerator of a replica), and the rollout lasts
the sum of holds plus replicas x start.

Steady traffic is spread by a router over the replicas that are up, and the
fleet is sized to it: each replica carries the same rate whatever the fleet's
size. The requests at stake are those sent to a departing replica (until the
router stops sending to it); the replicas that stay up complete theirs. So a
fleet of N costs N times the mean replica: the projection for 64 and 512
replicas is that model, not a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rehearsal.record import Cell


@dataclass(frozen=True)
class Step:
    """One replica's turn, in seconds from the rollout's start."""

    replica: int
    delete: float
    exit: float  # delete + its hold: the accelerators are free
    ready: float  # exit + start: the replacement serves; the next delete follows


def steps(holds: Sequence[float], start: float) -> list[Step]:
    """Each replica's delete, exit and replacement-ready times, one after another."""
    out, t = [], 0.0
    for i, hold in enumerate(holds):
        out.append(Step(i, t, t + hold, t + hold + start))
        t += hold + start
    return out


def held_total(holds: Sequence[float]) -> float:
    """Accelerator-seconds spent holding departing replicas: the sum of delete-to-exit."""
    return float(sum(holds))


def duration(holds: Sequence[float], start: float) -> float:
    """The whole rollout: every hold and every replacement's start, in sequence."""
    return held_total(holds) + len(holds) * start


@dataclass(frozen=True)
class Projection:
    """A fleet's rollout as the model predicts it from a run's replicas (real seconds)."""

    replicas: int
    held_total: float
    rollout: float
    completed: float
    cut: float
    refused: float


def project(
    holds: Sequence[float],
    counts: tuple[int, int, int],
    replicas: int,
    start: float,
) -> Projection:
    """Scale a run of len(holds) replicas (real holds; completed, cut, refused summed over
    them) to a fleet of `replicas`: the mean replica, that many times."""
    if not holds:
        raise ValueError("no replica to project from")
    per = replicas / len(holds)
    mean_hold = held_total(holds) / len(holds)
    return Projection(
        replicas=replicas,
        held_total=mean_hold * replicas,
        rollout=(mean_hold + start) * replicas,
        completed=counts[0] * per,
        cut=counts[1] * per,
        refused=counts[2] * per,
    )


@dataclass
class Rollout:
    """One recipe's rollout: its replica cells, run for real, and the start time accounted."""

    strategy: str
    cells: list[Cell]  # by replica index
    start: float  # real seconds a replacement takes to serve

    @property
    def scale(self) -> float:
        return self.cells[0].scale

    def holds(self) -> list[float]:
        """Each replica's hold in real seconds (measured / scale)."""
        return [c.held_s / c.scale for c in self.cells]

    def counts(self) -> tuple[int, int, int]:
        return (
            sum(c.completed for c in self.cells),
            sum(c.cut for c in self.cells),
            sum(c.refused for c in self.cells),
        )

    def steps(self) -> list[Step]:
        return steps(self.holds(), self.start)

    def projection(self, replicas: int) -> Projection:
        return project(self.holds(), self.counts(), replicas, self.start)

    def row(self) -> dict[str, Any]:
        """One JSON object (`--json`): a cell's fields over the replicas, and the rollout's.

        Seconds are as measured, like every cell's: held_total_s and rollout_s are the
        real ones times the scale. completed, cut, refused and reads are sums;
        sigterm_at_s, held_s, hook_returned_s and hook_elapsed_s means per replica, late_s
        the latest;
        hook_exit 0 only when every replica's hook returned 0; engine_exit `sigkill`
        when any replica was killed.
        """
        cells = self.cells
        first = cells[0]
        row = first.row()
        completed, cut, refused = self.counts()
        returned = [c.hook_returned_s for c in cells]
        exits = [c.hook_exit for c in cells]
        elapsed = [e for c in cells if (e := c.hook_elapsed()) is not None]
        holds = self.holds()
        row.update(
            completed=completed,
            cut=cut,
            refused=refused,
            sigterm_at_s=round(_mean([c.sigterm_at_s for c in cells]), 4),
            held_s=round(_mean([c.held_s for c in cells]), 4),
            hook_returned_s=None
            if None in returned
            else round(_mean([r for r in returned if r is not None]), 4),
            hook_exit=next((e for e in exits if e != 0), 0),
            engine_exit="sigkill" if any(c.sigkill for c in cells) else "clean",
            reads=sum(c.reads for c in cells),
            hook_elapsed_s=round(_mean(elapsed), 4) if elapsed else None,
            replicas=len(cells),
            held_total_s=round(held_total(holds) * self.scale, 4),
            rollout_s=round(duration(holds, self.start) * self.scale, 4),
            replica_held_s=[round(c.held_s, 4) for c in cells],
            late_s=round(max(c.late_s for c in cells), 4),
        )
        del row["netns"]
        row["netns"] = sorted({c.netns for c in cells})
        return row


def _mean(values: Sequence[float]) -> float:
    return float(sum(values)) / len(values) if values else 0.0
