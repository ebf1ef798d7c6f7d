"""The kubelet emulator: a Pod deletion, in the kubelet's order.

    t=0   the grace clock G (the recipe's) starts (deletionTimestamp) and the preStop hook runs
          (an exec command, the kubelet's sleep action, or nothing; for the oracle, the
          emulator waits until the replica's last request has ended)
    ...   SIGTERM to the container's main process as soon as the hook returns,
          or at G if it has not
    ...   SIGKILL at G, but never sooner than 2 s after SIGTERM (the kubelet's
          minimum grace once the hook has eaten the period)

The hook's process group dies with the container (when the engine exits or is
killed). The hook runs with what a Pod's containers find in their environment
(KUBERNETES_SERVICE_HOST and _PORT). Process exits are watched through pidfds,
so a hook's return is seen at once and SIGTERM follows it by well under a
millisecond.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rehearsal.strategies import HookTarget, Plan, Strategy
from rehearsal.timeline import KILL_AFTER_TERM, POD_ENV

ORACLE_POLL = 0.002  # s: how often the oracle looks at the load generator's records


@dataclass(frozen=True)
class Signals:
    """What the kubelet did, in monotonic seconds (None: did not happen)."""

    delete: float
    hook_returned: float | None  # the hook ended by itself before G
    hook_exit: int | None  # its exit status then
    sigterm: float
    exit: float  # the engine's process ended (on its own or by SIGKILL)
    sigkill: bool


def wait_exit(pidfd: int, until: float) -> bool:
    """Wait for the process behind pidfd to end, up to monotonic `until`."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return bool(poller.poll(0))
        if poller.poll(left * 1000.0):
            return True


def sleep_until(when: float) -> None:
    while (left := when - time.monotonic()) > 0:
        time.sleep(left)


def delete_pod(
    engine: subprocess.Popen[bytes],
    strategy: Strategy,
    target: HookTarget,
    delete_at: float,
    hook_log: Path,
    plan: Plan | None = None,
    work_over: Callable[[], bool] | None = None,
) -> Signals:
    """Delete the Pod at monotonic `delete_at` and carry it to its end."""
    f = target.scale
    engine_fd = os.pidfd_open(engine.pid)
    sleep_until(delete_at)
    delete = time.monotonic()
    grace_end = delete + f(strategy.grace)
    hook: subprocess.Popen[bytes] | None = None
    hook_returned: float | None = None
    hook_exit: int | None = None
    try:
        if strategy.kind == "exec":
            with open(hook_log, "wb") as log:
                hook = subprocess.Popen(
                    strategy.command(target, plan),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=hook_env(),
                )
            hook_fd = os.pidfd_open(hook.pid)
            try:
                if wait_exit(hook_fd, grace_end):
                    hook_returned = time.monotonic()
                    hook_exit = hook.wait()
            finally:
                os.close(hook_fd)
        elif strategy.kind == "sleep":
            # The kubelet's sleep action: the kubelet itself waits, truncated at G.
            sleep_until(min(delete + f(strategy.sleep), grace_end))
            hook_returned = time.monotonic()
            hook_exit = 0
        elif strategy.kind == "oracle":
            # Not a hook: the moment the last request ended, as the load generator records it.
            while not (work_over is None or work_over()) and time.monotonic() < grace_end:
                time.sleep(ORACLE_POLL)
        sigterm = time.monotonic()
        engine.send_signal(signal.SIGTERM)
        kill_at = max(grace_end, sigterm + f(KILL_AFTER_TERM))
        sigkill = not wait_exit(engine_fd, kill_at)
        if sigkill:
            engine.kill()
            wait_exit(engine_fd, time.monotonic() + 10.0)
        exit_at = time.monotonic()
        engine.wait()
    finally:
        os.close(engine_fd)
        if hook is not None and hook.poll() is None:
            # The container is gone: so is every process in it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(hook.pid, signal.SIGKILL)
            hook.wait()
    return Signals(delete, hook_returned, hook_exit, sigterm, exit_at, sigkill)


def hook_env() -> dict[str, str]:
    """The runner's environment without DRAINHOOK_* (the hooks get flags only), as in a Pod."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAINHOOK_")}
    env.pop("PYTHONWARNINGS", None)
    return {**env, **POD_ENV}
