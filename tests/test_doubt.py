"""Doubt holds (CONTRACT §2a, §5), through the real CLI: a side signal in doubt,
vLLM without scheduler gauges, a stderr nobody reads, a G that overflows a
sleep, SIGHUP, a symbolic link at the termination path, a probe whose output
cannot be written, values that are not a host or a port. Each case asserts the
exit code, the time it took and the line that says why, and each is told apart
from what the hook did before: released the engine early, or ran past D."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import SPAWN_LATE, late
from tests.support.logs import fields
from tests.support.loopback import (
    Behaviour,
    Loopback,
    read_request,
    response_bytes,
    sample,
    sequence,
    serve,
)
from tests.support.process import Hook, base_env
from tests.support.waits import until

VLLM_IDLE = sample("vllm-single-dp2-idle.txt")
VLLM_IDLE_RAW = response_bytes(VLLM_IDLE)
LOAD_0 = response_bytes(b'{"server_load": 0}')
LOAD_1 = response_bytes(b'{"server_load": 1}')
VLLM_BUSY = sample("vllm-single-dp2.txt")
SGLANG_IDLE = sample("sglang-mp-dp2-idle.txt")
# G 3, R 1: D = 2 s; the first read at S = 0.5 s, one every 0.25 s.
TIMELINE = ("--grace", "3", "--exit-reserve", "1", "--settle", "0.5", "--interval", "0.25")
D = 2.0


def summary_of(stderr: str) -> dict[str, str]:
    return fields([line for line in stderr.splitlines() if "outcome=" in line][-1])


def answers(paths: dict[str, bytes | int]) -> Behaviour:
    """Each path's body (200), or its status (an int, no body); 404 elsewhere."""

    def behaviour(conn: socket.socket) -> None:
        parts = read_request(conn).split(b" ", 2)
        got = paths.get(parts[1].decode("latin-1"), 404) if len(parts) == 3 else 404
        if isinstance(got, int):
            conn.sendall(response_bytes(b"", got, "X"))
        else:
            conn.sendall(response_bytes(got))

    return behaviour


@pytest.mark.parametrize(
    ("paths", "why"),
    [
        ({"/metrics": VLLM_IDLE, "/load": 503}, "/load gave no count (HTTP 503): doubt"),
        ({"/metrics": VLLM_IDLE, "/load": 429}, "/load gave no count (HTTP 429): doubt"),
        (
            {"/metrics": VLLM_IDLE, "/load": b'{"server_load": 0, "server_load": 3}'},
            "/load: server_load given 2 times: doubt",
        ),
        ({"/metrics": SGLANG_IDLE, "/v1/loads": 500}, "/v1/loads gave no count (HTTP 500): doubt"),
        (
            {"/metrics": SGLANG_IDLE, "/v1/loads": b'{"loads": []}'},
            "/v1/loads gave no count (loads list is empty): doubt",
        ),
    ],
    ids=["load-503", "load-429", "load-twice", "loads-500", "loads-empty"],
)
def test_a_side_signal_in_doubt_holds_an_idle_scheduler_to_d(
    hook: Hook, paths: dict[str, bytes | int], why: str
) -> None:
    """Before: the signal was `missing` and the gauges alone released at S + I/4."""
    with Loopback(answers(paths), own_load=False) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", "")
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"], end["reason"]) == (3, "deadline", why), run.stderr
    assert D - 0.05 <= float(end["elapsed"]) <= late(D, SPAWN_LATE, run.starved)


def test_a_missing_side_signal_still_releases_an_idle_engine(hook: Hook) -> None:
    """A vLLM without /load (404) is `missing`, not doubt: drained at S + I/4 or so."""
    with Loopback(answers({"/metrics": VLLM_IDLE}), own_load=False) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", "")
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"]) == (0, "drained"), run.stderr
    assert float(end["elapsed"]) <= late(0.5 + 0.25, SPAWN_LATE, run.starved)


LOAD_3 = response_bytes(b'{"server_load": 3}')
# 2xx answers that are no count, each raw as it reaches the hook.
CUT = {
    "html": response_bytes(b"<html><body>maintenance</body></html>", headers={"Content-Type": ""}),
    "empty": response_bytes(b""),
    "short": response_bytes(b'{"server_load": 3}', headers={"Content-Length": "40"}),
    "http10-fin": b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"server_lo',
    "204": b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
}


def raw_per_path(paths: dict[str, list[bytes]]) -> Behaviour:
    """Each path's raw answers in turn (the last repeats), then close; 404 elsewhere."""
    served: dict[str, int] = {}

    def behaviour(conn: socket.socket) -> None:
        parts = read_request(conn).split(b" ", 2)
        path = parts[1].decode("latin-1") if len(parts) == 3 else ""
        answers = paths.get(path, [response_bytes(b"", 404, "Not Found")])
        nth = served[path] = served.get(path, -1) + 1
        conn.sendall(answers[min(nth, len(answers) - 1)])

    return behaviour


@pytest.mark.parametrize("kind", sorted(CUT))
def test_a_side_signal_that_has_counted_is_never_missing_after(hook: Hook, kind: str) -> None:
    """vLLM's /load answers 3, then a 2xx that is no count. Before: /load was turned
    off for good, and the idle gauges released the engine at the next reads."""
    paths = {"/metrics": [VLLM_IDLE_RAW], "/load": [LOAD_3, CUT[kind]]}
    with Loopback(raw_per_path(paths), own_load=False) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", "")
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"]) == (3, "deadline"), run.stderr
    assert end["reason"].startswith("/load"), end["reason"]
    assert D - 0.05 <= float(end["elapsed"]) <= late(D, SPAWN_LATE, run.starved)


@pytest.mark.parametrize("kind", ["empty", "short", "http10-fin", "204"])
def test_an_empty_or_cut_side_answer_is_doubt_even_first(hook: Hook, kind: str) -> None:
    """A body that was cut (or never sent) is `closed during the response`, not a
    path the engine does not serve: held to D, where `missing` released at S + I/4."""
    paths = {"/metrics": [VLLM_IDLE_RAW], "/load": [CUT[kind]]}
    with Loopback(raw_per_path(paths), own_load=False) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", "")
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"]) == (3, "deadline"), run.stderr
    assert D - 0.05 <= float(end["elapsed"]) <= late(D, SPAWN_LATE, run.starved)


def test_a_side_signal_found_missing_is_asked_again_and_counts(hook: Hook) -> None:
    """/load is 404 (a worker restarting behind the port), then answers 1, then 0:
    the confirming read finds the 1 and holds; drained on two 0s. Before: /load was
    never asked again, and the hook drained on its second read."""
    not_found = response_bytes(b"", 404, "Not Found")
    paths = {"/metrics": [VLLM_IDLE_RAW], "/load": [not_found, LOAD_1, LOAD_0]}
    with Loopback(raw_per_path(paths), own_load=False) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", "")
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"], end["reads"]) == (0, "drained", "4"), run.stderr


def test_vllm_without_scheduler_gauges_is_named_and_held(hook: Hook, tmp_path: Path) -> None:
    """`--disable-log-stats`: /metrics has no vllm: gauges, /load answers. Held to D,
    named in the read line, the summary and the termination message."""
    body = b'# TYPE http_requests_total counter\nhttp_requests_total{handler="/v1/completions"} 3\n'
    out = tmp_path / "termination"
    with Loopback(
        answers({"/metrics": body, "/load": b'{"server_load": 0}'}), own_load=False
    ) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", str(out))
    end = summary_of(run.stderr)
    assert (run.code, end["outcome"]) == (3, "deadline"), run.stderr
    assert "--disable-log-stats" in end["reason"]
    assert "--disable-log-stats" in out.read_text()


def fill(w: int) -> None:
    """Fill a pipe through a file description of its own, non-blocking (`w`'s stays
    blocking, as a stderr the hook inherits does)."""
    filler = os.open(f"/proc/self/fd/{w}", os.O_WRONLY | os.O_NONBLOCK)
    try:
        while True:
            os.write(filler, b"x" * 65536)
    except BlockingIOError:
        pass
    finally:
        os.close(filler)


def test_a_stderr_nobody_reads_never_holds_the_hook(entry: list[str]) -> None:
    """A `2>&1 | consumer` whose consumer stalls: lines are lost, never time; the hook
    ends at D (exit 3). Before: its first line blocked it past D and past SIGTERM."""
    r, w = os.pipe()
    fill(w)
    with Loopback(answers({"/metrics": VLLM_BUSY})) as srv:
        argv = [*entry, "wait", "--url", srv.url, *TIMELINE, "--termination-log", ""]
        start = time.monotonic()
        proc = subprocess.Popen([*argv, "--log-reads", "all"], stdout=w, stderr=w, env=base_env())
        os.close(w)
        try:
            code = proc.wait(timeout=D + 10)
        finally:
            proc.kill()
            os.close(r)
        took = time.monotonic() - start
    assert code == 3
    assert D - 0.05 <= took <= late(D, SPAWN_LATE)


def test_any_grace_is_held_sighup_is_ignored_and_sigterm_ends_it(entry: list[str]) -> None:
    """--grace 9999999999 overflowed a sleep and released a busy engine at 0.14 s; the
    hook now reads on. SIGHUP (a closed terminal) changes nothing; SIGTERM ends it (143)."""
    argv = [*entry, "wait", "--grace", "9999999999", "--settle", "0.2", "--interval", "0.2"]
    with Loopback(answers({"/metrics": VLLM_BUSY})) as srv, subprocess.Popen(
        [*argv, "--url", srv.url, "--termination-log", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=base_env(),
    ) as proc:  # fmt: skip
        try:
            until(lambda: srv.connections >= 3 or proc.poll() is not None, within=10.0)
            assert proc.poll() is None, "a busy engine was let go"
            proc.send_signal(signal.SIGHUP)
            seen = srv.connections
            until(lambda: srv.connections >= seen + 2 or proc.poll() is not None, within=10.0)
            assert proc.poll() is None, "SIGHUP ended the hook"
            proc.send_signal(signal.SIGTERM)
            err = proc.communicate(timeout=10)[1].decode()
        finally:
            proc.kill()
    code = proc.returncode
    assert code == 143, err
    assert "Traceback" not in err


def test_the_termination_log_is_never_followed_through_a_link(hook: Hook, tmp_path: Path) -> None:
    """CONTRACT §6: a link at the path is not followed; its target keeps its bytes."""
    precious = tmp_path / "precious"
    precious.write_text("keep\n")
    link = tmp_path / "termination"
    link.symlink_to(precious)
    with Loopback(answers({"/metrics": VLLM_IDLE}), own_load=False) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", str(link))
    assert run.code == 0, run.stderr
    assert precious.read_text() == "keep\n"
    assert "symbolic link" in run.stderr


def test_probe_exits_with_its_verdict_when_its_output_cannot_be_written(
    entry: list[str],
) -> None:
    """A closed pipe gave 1 (busy) for an idle engine, a full disk 70 (a bug)."""
    with Loopback(answers({"/metrics": VLLM_IDLE}), own_load=False) as srv:
        argv = [*entry, "probe", "--url", srv.url]
        r, w = os.pipe()
        os.close(r)
        try:
            closed = subprocess.run(argv, stdout=w, stderr=subprocess.DEVNULL, env=base_env())
        finally:
            os.close(w)
        with open("/dev/full", "wb") as full:
            disk = subprocess.run(argv, stdout=full, stderr=subprocess.DEVNULL, env=base_env())
    assert (closed.returncode, disk.returncode) == (0, 0)


def test_an_empty_path_reads_metrics(hook: Hook) -> None:
    """`--path ''` read `/`: a 404, a wrong target held to D. Now /metrics, as
    `--url http://h:p` (no path) already read."""
    with Loopback(answers({"/metrics": VLLM_IDLE}), own_load=False) as srv:
        port = srv.port
        run = hook("probe", "--port", str(port), "--path", "")
    assert run.code == 0, run.stderr
    assert f"127.0.0.1:{port}/metrics" in run.stdout


@pytest.mark.parametrize(
    "args",
    [("plan", "--grace", "30", "--output", "yaml"), ("inject", "--via", "image", "-")],
    ids=["plan", "inject"],
)
def test_plan_and_inject_whose_output_cannot_be_written_exit_74(
    entry: list[str], args: tuple[str, ...]
) -> None:
    """A full disk or a closed pipe: EX_IOERR (74) with one line; before, 70 (a bug)
    for plan, and a traceback's code for inject."""
    deployment = (
        Path(__file__).parents[1] / "examples" / "plain" / "vllm-deployment.yaml"
    ).read_bytes()
    argv = [*entry, *args]

    def run(stdout: int) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            argv, input=deployment, stdout=stdout, stderr=subprocess.PIPE, env=base_env()
        )

    r, w = os.pipe()
    os.close(r)
    try:
        closed = run(w)
    finally:
        os.close(w)
    with open("/dev/full", "wb") as full:
        disk = run(full.fileno())
    for done, why in ((closed, "Broken pipe"), (disk, "No space left on device")):
        assert done.returncode == 74, done.stderr
        said = done.stderr.decode().splitlines()
        assert said[-1] == f"drainhook: cannot write the output: {why}"
        assert "Traceback" not in done.stderr.decode()


@pytest.mark.parametrize(
    "args",
    [
        ("--host", "localhost/"),
        ("--host", "localhost?x"),
        ("--host", "localhost#"),
        ("--host", "user@localhost"),
        ("--host", "local host"),
        ("--url", "http://127.0.0.1:0/metrics"),
    ],
)
def test_what_is_not_a_host_or_a_port_is_a_usage_error(hook: Hook, args: tuple[str, ...]) -> None:
    """Before: `localhost/` read port 80 silently, and port 0 was read."""
    run = hook("probe", *args)
    assert run.code == 2, run.stderr
    assert len(run.stderr.splitlines()) == 1


def test_an_interval_under_100ms_is_warned_about(hook: Hook) -> None:
    run = hook("plan", "--grace", "30", "--interval", "1ms")
    assert run.code == 0 and "interval-short" in run.stdout + run.stderr


def churning(n: int) -> bytes:
    """A busy vLLM body whose model_name values differ on every read (a reused
    PROMETHEUS_MULTIPROC_DIR with runs coming and going)."""
    lines = [
        f'vllm:num_requests_{g}{{model_name="m{n}-{k}"}} 1'
        for g in ("running", "waiting")
        for k in (0, 1)
    ]
    return ("\n".join(lines) + "\n").encode()


def test_a_warning_is_said_once_per_kind_whatever_its_values(hook: Hook) -> None:
    """Before: a line per read, as each read's values made a new text."""
    bodies = [serve(churning(n)) for n in range(40)]
    with Loopback(sequence(*bodies)) as srv:
        run = hook("wait", "--url", srv.url, *TIMELINE, "--termination-log", "")
    assert run.code == 3, run.stderr
    said = [line for line in run.stderr.splitlines() if "several model_name values" in line]
    assert len(said) == 1
    assert int(fields(run.summary)["reads"]) >= 4


@pytest.mark.parametrize(
    "args",
    [("--help",), ("--version",), ("wait", "--help"), ("probe", "-h"), ("inject", "--help")],
    ids=["help", "version", "wait", "probe", "inject"],
)
def test_help_and_version_into_a_full_disk_exit_74(entry: list[str], args: tuple[str, ...]) -> None:
    """What a person asked to read could not be written: EX_IOERR (74) and one line,
    at once. Before: 70, the code of a bug, and `wait --help` held as a blind sleep
    to D = 25 s."""
    with open("/dev/full", "wb") as full:
        start = time.monotonic()
        done = subprocess.run(
            [*entry, *args], stdout=full, stderr=subprocess.PIPE, env=base_env(), timeout=60
        )
        elapsed = time.monotonic() - start
    said = done.stderr.decode().splitlines()
    assert (done.returncode, said) == (
        74,
        ["drainhook: cannot write the output: No space left on device"],
    )
    assert elapsed < late(5.0, SPAWN_LATE), elapsed  # not held to D = 25 s


@pytest.mark.parametrize("char", ["\0", "\a", "\x1b"], ids=["NUL", "BEL", "ESC"])
def test_a_manifest_with_a_control_character_is_a_data_error_named_with_its_line(
    entry: list[str], char: str
) -> None:
    """YAML allows no control character: one in the second document's fifth line is
    named there (exit 2, as any input that is not YAML). Before: 70, a bug."""
    text = f"apiVersion: v1\nkind: ConfigMap\n---\nkind: Pod\nmetadata:\n  name: a{char}b\n"
    done = subprocess.run(
        [*entry, "inject", "--via", "init", "--image", "r", "-"],
        input=text.encode(),
        capture_output=True,
        env=base_env(),
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().splitlines() == [
        "drainhook: -#1: not YAML at line 6: a control character"
    ]
    assert done.stdout == b""


@pytest.mark.parametrize("value", ["1e-320", "4e-310"])
def test_an_interval_that_underflows_is_a_usage_error(hook: Hook, value: str) -> None:
    """A subnormal --interval (its reciprocal overflows): a usage error naming it in
    `plan` and `probe --watch` (exit 2 at once), and in `wait` held to D as any usage
    error (exit 2 at D = 2 s). Before: wait said `internal error: OverflowError` (70),
    and `probe --watch` read without pause until interrupted."""
    said = f"drainhook: --interval is too small to be a number of seconds: {float(value)}"
    plan = hook("plan", "--grace", "30", "--interval", value)
    assert (plan.code, plan.stderr.splitlines()[-1]) == (2, said), plan.stderr
    watch = hook("probe", "--watch", "--interval", value, "--port", "9")
    assert (watch.code, watch.stderr.splitlines()[-1]) == (2, said), watch.stderr
    wait = hook("wait", "--interval", value, "--grace", "3", "--exit-reserve", "1", "--port", "9")
    assert wait.code == 2 and said in wait.stderr.splitlines()[0], wait.stderr
    assert 1.9 <= wait.elapsed <= late(2.0, SPAWN_LATE), wait.elapsed  # held to D


def test_a_terminal_nobody_reads_never_holds_the_hook(entry: list[str]) -> None:
    """stderr a pseudo-terminal whose reader stalls (a `kubectl exec -t` left open),
    its buffer full: the tty driver waits for room inside a write that poll allowed,
    so lines are now written through a non-blocking description of its own and lost
    when there is no room, never time: the hook ends at D (exit 3). Before: blocked
    in its first line past D, until a signal."""
    master, slave = os.openpty()
    room = select.poll()
    room.register(slave, select.POLLOUT)
    try:
        fill(slave)
        os.read(master, 1)  # a little room: poll allows a write that then waits in the driver
        until(lambda: bool(room.poll(0)), within=5.0)
        with Loopback(answers({"/metrics": VLLM_BUSY})) as srv:
            argv = [*entry, "wait", "--url", srv.url, *TIMELINE, "--termination-log", ""]
            start = time.monotonic()
            proc = subprocess.Popen(  # a read line every 5 ms (I/4): the room runs out
                [*argv, "--log-reads", "all", "--interval", "0.02"],
                stdout=slave,
                stderr=slave,
                env=base_env(),
            )
            try:
                code = proc.wait(timeout=D + 10)
            finally:
                proc.kill()
            took = time.monotonic() - start
    finally:
        os.close(master)
        os.close(slave)
    assert code == 3
    assert D - 0.05 <= took <= late(D, SPAWN_LATE)
