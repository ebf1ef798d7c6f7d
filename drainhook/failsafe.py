"""The hook's stdlib-only ground (CONTRACT §1, §5): G, R and D's rule, the duration
syntax, the non-blocking writes and the termination writer, which the launcher
(packaging/launcher.c) copies and a test holds it to. And `wait` fails safe: a bug,
a broken install or a wrong flag ends in `hold`: one line, the wait until D like the
blind sleep the hook replaces, the termination message, then the exit code (70, or
2 for usage). D is the config's, else `plain_deadline`'s, from the flags read plainly."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import time
from collections.abc import Callable, Mapping, Sequence

DEFAULT_GRACE = 30.0  # terminationGracePeriodSeconds when unset
DEFAULT_EXIT_RESERVE = 5.0
# The hook's process must be gone by D as the kubelet sees it (it sends SIGTERM
# when the process ends): the loop ends this much before D, for the termination
# message, the summary line and the exit itself. Logged deadlines stay D.
EXIT_ALLOWANCE = 0.02

TERMINATION_PATH = "/dev/termination-log"
TERMINATION_MAX_BYTES = 4096  # what the kubelet keeps of a termination message

_UNITS = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0}
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|m)?\s*")
# The longest single sleep: whatever G parses to is held in slices (time.sleep
# overflows past about 9.2e9 s), and a pending signal is seen at each one.
SLICE = 60.0
PIPE_BUF = 4096  # a write this size fits a pipe that polls writable: it never waits


def deadline(grace: float, reserve: float, max_wait: float | None) -> float:
    """D = min(G - R, max-wait), never before t0 (CONTRACT §1)."""
    d = grace - reserve if max_wait is None else min(grace - reserve, max_wait)
    return max(0.0, d)


def sleep_until(until: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
    """Sleep until `until` on `clock`, in slices of at most SLICE."""
    while (now := clock()) < until:
        sleep(min(until - now, SLICE))


# An inherited terminal's own non-blocking file description (None: none could be
# opened), by the descriptor it stands for.
_TERMINALS: dict[int, int | None] = {}


def _own_if_terminal(fd: int) -> int | None:
    """`fd`, or for a terminal a file description of its own, non-blocking: a tty's
    driver waits for room inside a write that poll allowed (a `kubectl exec -t`
    nobody reads), and the inherited description is shared, never made O_NONBLOCK.
    None for a terminal that cannot be opened so: its lines are lost, never time."""
    if fd not in _TERMINALS:
        _TERMINALS[fd] = fd
        if os.isatty(fd):
            _TERMINALS[fd] = None
            flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            with contextlib.suppress(OSError):
                _TERMINALS[fd] = os.open(f"/proc/self/fd/{fd}", flags)
    return _TERMINALS[fd]


def write_now(fd: int, data: bytes) -> None:
    """Write what `fd` takes now, never waiting (CONTRACT §5): poll it with a zero
    timeout before each PIPE_BUF; a stderr nobody reads loses the rest. The
    descriptor's file description is never made O_NONBLOCK (others share it); a
    terminal is written through one of its own that is (`_own_if_terminal`)."""
    poll = select.poll()
    with contextlib.suppress(OSError, ValueError):
        if (out := _own_if_terminal(fd)) is None:
            return
        poll.register(out, select.POLLOUT)
        while data and poll.poll(0):
            data = data[os.write(out, data[:PIPE_BUF]) :]


def seconds(text: str) -> float | None:
    """A duration as the flags take it (`1.5`, `1.5s`, `250ms`, `2m`), or None."""
    m = _DURATION.fullmatch(text)
    if m is None:
        return None
    value = float(m.group(1)) * _UNITS[m.group(2) or ""]
    return value if value < float("inf") else None


def is_wait(argv: Sequence[str]) -> bool:
    """Whether this command line runs `wait` (its first word names the command)."""
    return bool(argv) and argv[0] == "wait"


def flag_value(argv: Sequence[str], environ: Mapping[str, str], flag: str) -> str | None:
    """The last `--flag V` or `--flag=V` of argv, else DRAINHOOK_<FLAG> (perhaps ''), else
    None: read plainly, nothing else of the command line understood."""
    found: str | None = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
    if found is None:
        found = environ.get("DRAINHOOK_" + flag.lstrip("-").upper().replace("-", "_"))
    return found


def plain_deadline(argv: Sequence[str], environ: Mapping[str, str]) -> float:
    """D = min(G - R, max-wait) from the flags and variables read plainly; a value
    that cannot be read is its default (G 30, R 5, no cap: D 25)."""

    def value(flag: str, default: float | None) -> float | None:
        text = flag_value(argv, environ, flag)
        got = seconds(text) if text is not None else None
        return default if got is None else got

    grace = value("--grace", DEFAULT_GRACE)
    reserve = value("--exit-reserve", DEFAULT_EXIT_RESERVE)
    assert grace is not None and reserve is not None
    return deadline(grace, reserve, value("--max-wait", None))


def plain_termination(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, bool] | None:
    """The termination message's (path, create) read plainly: `--termination-log`
    or its variable (`''` turns it off), else /dev/termination-log when it exists."""
    value = flag_value(argv, environ, "--termination-log")
    if value is None:
        return (TERMINATION_PATH, False) if os.path.exists(TERMINATION_PATH) else None
    return (value, True) if value else None


def encode(text: str) -> bytes:
    """One termination line of at most 4096 bytes of UTF-8, cut on a character."""
    line = " ".join(("drainhook: " + text).split())
    data = line.encode("utf-8", "replace")
    if len(data) <= TERMINATION_MAX_BYTES:
        return data
    cut = data[: TERMINATION_MAX_BYTES - 3].decode("utf-8", "ignore")
    return cut.encode("utf-8") + b"..."


def write_termination(path: str | os.PathLike[str], create: bool, text: str) -> str | None:
    """Write the termination line without ever blocking; the reason it failed, or None.

    O_NONBLOCK: a FIFO nobody reads refuses at once instead of hanging (a file
    description of its own). O_NOFOLLOW: a link there is not followed (§6)."""
    flags = os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW
    if create:
        flags |= os.O_CREAT
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "it is a symbolic link, which is not followed"
        return "no process reads that FIFO" if exc.errno == errno.ENXIO else exc.strerror
    try:
        os.write(fd, encode(text))
    except OSError as exc:
        return exc.strerror
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return None


def say(line: str, log_file: str | os.PathLike[str] | None = None) -> None:
    """One line on stderr, and in `log_file` when given (`--log-file`: where an
    operator reads the hook's lines), never waiting; a failure loses the line."""
    data = (" ".join(line.split()) + "\n").encode("utf-8", "replace")
    write_now(2, data)
    if log_file is not None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
        with contextlib.suppress(OSError):
            fd = os.open(log_file, flags, 0o644)
            try:
                write_now(fd, data)
            finally:
                os.close(fd)


def hold(
    line: str,
    *,
    t0: float,
    deadline: float,
    termination: tuple[str | os.PathLike[str], bool] | None,
    log_file: str | os.PathLike[str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Say the failure in one line (`line`: `drainhook: <what failed>`), wait
    until t0 + deadline (less the exit allowance), then write the termination
    message. The caller exits with the failure's code. A SIGTERM or SIGINT
    meanwhile (the entry point's handler raises it here) ends the hold: the
    termination message says so, as at any other end, and the signal goes on."""
    failure = line.split(": ", 1)[-1]
    ended = f"failed safe at {{:.1f}} s (held to D = {deadline:g} s): {failure}"
    try:
        held = f"{line}; holding as a blind sleep until D = {deadline:g} s"
        say(held + ("; Ctrl-C stops it" if _at_terminal() else ""), log_file)
        sleep_until(t0 + max(0.0, deadline - EXIT_ALLOWANCE), clock, sleep)
    except BaseException:
        ended = f"interrupted at {{:.1f}} s while failed safe (D = {deadline:g} s): {failure}"
        raise
    finally:
        if termination is not None:
            why = write_termination(termination[0], termination[1], ended.format(clock() - t0))
            if why is not None:
                say(f"drainhook: cannot write --termination-log {termination[0]}: {why}")


def _at_terminal() -> bool:
    """Whether stderr is a terminal (a person ran the hook by hand, not a kubelet)."""
    try:
        return os.isatty(2)
    except OSError:
        return False


def hold_plain(line: str, argv: Sequence[str], t0: float) -> None:
    """`hold` with D and the termination path read plainly (no config was built)."""
    environ = os.environ
    hold(
        line,
        t0=t0,
        deadline=plain_deadline(argv, environ),
        termination=plain_termination(argv, environ),
        log_file=flag_value(argv, environ, "--log-file") or None,
    )


def describe(exc: BaseException) -> str:
    """A failure in a few words: its kind and message, on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
