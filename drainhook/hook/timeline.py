"""The instants of `wait`'s timeline for a config (CONTRACT §1), and the rules that
find what is wrong with them: the warnings `wait` logs at its start and `plan`
prints first. Pure arithmetic; the only part of the planning the hook imports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from drainhook.hook.config import WaitConfig
from drainhook.numfmt import seconds

# A grace below 15 s leaves no room to settle, read and exit; above an hour, a
# drain outlasts what node drains allow (the cluster autoscaler's default
# --max-graceful-termination-sec is 600 s) and holds a rollout that long.
GRACE_MIN = 15.0
GRACE_MAX = 3600.0
# Endpoint controllers, kube-proxy and ingress controllers usually drop a
# deleted Pod within a few seconds; 5 s is the common allowance.
ROUTER_DEREGISTRATION = 5.0
# The kubelet gives a container at least 2 s between SIGTERM and SIGKILL
# (minimumGracePeriodInSeconds in kuberuntime), even when the hook used all of G.
KUBELET_MIN_STOP = 2.0


@dataclass(frozen=True)
class Fix:
    """A value a warning's advice names, which `plan --output yaml` applies."""

    field: str  # a WaitConfig field: "grace" or "exit_reserve"
    value: float
    because: str


@dataclass(frozen=True)
class PlanWarning:
    """One thing the timeline's numbers (or the Pod spec's) get wrong, and why it matters."""

    code: str
    message: str
    reason: str
    fixes: tuple[Fix, ...] = ()  # the values its advice names, if it names any


@dataclass(frozen=True)
class Instants:
    """The instants of one timeline, in seconds from the hook's start (t=0)."""

    config: WaitConfig
    first_read: float | None  # None: the deadline comes before the settle ends
    idle_return: float  # when an idle engine's hook returns (reads take no time)
    idle_drains: bool  # whether that return is `drained` (else the deadline comes first)
    reads_max: int  # reads that fit before D when each takes no time

    @property
    def grace(self) -> float:
        return self.config.grace

    @property
    def settle_end(self) -> float:
        return min(self.config.settle, self.deadline)

    @property
    def deadline(self) -> float:
        return self.config.deadline

    @property
    def sigterm_latest(self) -> float:
        """The kubelet sends SIGTERM as soon as the hook returns: at D at the latest."""
        return self.deadline

    @property
    def kill(self) -> float:
        """SIGKILL: at G, or 2 s after the hook when it returned later than G - 2."""
        return max(self.grace, self.deadline + KUBELET_MIN_STOP)

    @property
    def stall_earliest(self) -> float | None:
        """When a stalled engine's hook returns at the earliest (CONTRACT §2b): a
        window of W from the first read; None when off, or not before D."""
        w = self.config.stall_window
        if w <= 0 or self.first_read is None or self.first_read + w >= self.deadline:
            return None
        return self.first_read + w


def instants(config: WaitConfig) -> Instants:
    """The timeline `wait` runs for config (the config is not checked here)."""
    s, d, i = config.settle, config.deadline, config.interval
    first_read = s if s < d else None
    confirmed = s + (config.confirm - 1) * i
    drains = confirmed < d
    idle_return = min(confirmed + config.linger, d) if drains else d
    reads_max = math.ceil((d - s) / i - 1e-9) if d > s else 0
    return Instants(config, first_read, idle_return, drains, reads_max)


# The timeline's rules (`plan` checks them first, then its own advice): `wait` logs
# what they find at its start, each once.
TimelineRule = Callable[[Instants], PlanWarning | None]


def _grace_range(t: Instants) -> PlanWarning | None:
    """grace-range: G is outside 15..3600 s"""
    g = t.grace
    if g < GRACE_MIN:
        return PlanWarning(
            "grace-range",
            f"G = {seconds(g)} is under {seconds(GRACE_MIN)}",
            "there is no room to settle, read and still leave the engine time to exit",
        )
    if g > GRACE_MAX:
        return PlanWarning(
            "grace-range",
            f"G = {seconds(g)} is over {seconds(GRACE_MAX)}",
            "a drain that long outlasts node drains (the cluster autoscaler waits "
            "600 s by default) and holds every rollout as long",
        )
    return None


def _grace_fraction(t: Instants) -> PlanWarning | None:
    """grace-fraction: G is not whole seconds (terminationGracePeriodSeconds is an integer)"""
    if t.grace == int(t.grace):
        return None
    return PlanWarning(
        "grace-fraction",
        f"G = {seconds(t.grace)} is not whole seconds",
        "terminationGracePeriodSeconds is an integer and --grace must equal it",
    )


def _settle_past_deadline(t: Instants) -> PlanWarning | None:
    """settle-past-deadline: the settle lasts to the deadline (no read)"""
    if t.first_read is not None:
        return None
    s, d = t.config.settle, t.deadline
    return PlanWarning(
        "settle-past-deadline",
        f"the settle S = {seconds(s)} lasts to the deadline D = {seconds(d)} or past it: "
        "not a single read",
        "the hook returns at D with `deadline` without knowing whether the engine "
        f"is idle; raise G to {least_grace(t.config)} s, or lower --settle or --exit-reserve",
    )


def least_grace(c: WaitConfig) -> int:
    """The G each "raise G" names, past every floor: room after S for the confirming
    reads before D, the range's floor, a given --stall-after's window before D."""
    room = c.settle + (c.confirm - 1) * c.interval + c.reach.read_timeout + c.exit_reserve
    stall = math.floor(c.settle + c.stall_after + c.exit_reserve) + 1 if c.stall_after else 0
    return max(math.ceil(room), stall, int(GRACE_MIN))


def _no_room(t: Instants) -> PlanWarning | None:
    """no-room: D - S leaves no room for the confirming reads"""
    c = t.config
    need = (c.confirm - 1) * c.interval + c.reach.read_timeout
    if c.settle + need <= t.deadline or t.first_read is None:
        return None  # (no read at all is settle-past-deadline's)
    return PlanWarning(
        "no-room",
        f"D - S = {seconds(t.deadline - c.settle)} leaves no room for the {c.confirm} "
        f"confirming reads (they need {seconds(need)}: {c.confirm - 1} x interval + "
        "read timeout)",
        f"even an idle engine's hook then runs to the deadline; raise G to {least_grace(c)} s, "
        "or lower --settle, --exit-reserve or --interval",
    )


def _settle_short(t: Instants) -> PlanWarning | None:
    """settle-short: the settle is under 5 s"""
    s = t.config.settle
    if s >= ROUTER_DEREGISTRATION:
        return None
    return PlanWarning(
        "settle-short",
        f"settle S = {seconds(s)} is shorter than the usual router deregistration "
        f"({seconds(ROUTER_DEREGISTRATION)})",
        "a router that has not yet dropped the Pod may still send it a request "
        "after the hook has read it idle; that request dies at SIGTERM",
    )


def _exit_reserve_short(t: Instants) -> PlanWarning | None:
    """exit-reserve-short: the exit reserve is under 2 s"""
    r = t.config.exit_reserve
    if r >= KUBELET_MIN_STOP:
        return None
    return PlanWarning(
        "exit-reserve-short",
        f"exit reserve R = {seconds(r)} is under {seconds(KUBELET_MIN_STOP)}: the kill lands "
        f"at D + {seconds(KUBELET_MIN_STOP)} = {seconds(t.kill)}, after G",
        "the kubelet always leaves a container 2 s between SIGTERM and SIGKILL, "
        "and an engine needs seconds to exit cleanly",
    )


# Below this interval the reads cost the engine's API server more than they buy (CONTRACT §5).
MIN_INTERVAL = 0.1


def _interval_short(t: Instants) -> PlanWarning | None:
    """interval-short: reads more often than every 100 ms"""
    i = t.config.interval
    if i >= MIN_INTERVAL:
        return None
    return PlanWarning(
        "interval-short",
        f"interval I = {seconds(i)} is under {seconds(MIN_INTERVAL)}: the engine is read "
        f"up to {4 / i:.0f} times a second while the work drains",
        "each read costs the engine's API server a request; the release after idle "
        "follows I/4, and 1 s (the default) releases within 0.5 s of the last request",
    )


TIMELINE_RULES: tuple[TimelineRule, ...] = (
    _interval_short,
    _grace_range,
    _grace_fraction,
    _settle_past_deadline,
    _no_room,
    _settle_short,
    _exit_reserve_short,
)


def timeline_warnings(config: WaitConfig) -> tuple[PlanWarning, ...]:
    """What TIMELINE_RULES find wrong with the timeline `wait` is about to run.

    Pure arithmetic on the config (microseconds). Never raises: the hook's job is
    the drain, so a rule that fails (a bug) becomes a warning of its own."""
    try:
        found = instants(config)
        return tuple(w for rule in TIMELINE_RULES if (w := rule(found)) is not None)
    except Exception as exc:  # a bug; the drain goes on (CONTRACT §6)
        return (
            PlanWarning(
                "timeline-unchecked",
                f"the timeline could not be checked: {type(exc).__name__}: {exc}",
                "a bug in drainhook's rules; the drain itself is not affected",
            ),
        )
