"""The /proc/net parser and the reads it plans (drainhook.reading.discovery.listeners).

The fixture, tests/proc_net/tcp and tcp6, is real text from a little-endian
host (tests/proc_net/make.sh made it in an empty network namespace): vLLM's
two API servers on 0.0.0.0:8000 (SO_REUSEPORT) beside an IPv6-only :: on the
same port, SGLang's 127.0.0.1:30000 with a connection to it, ::1, a dual-stack
::, an IPv4-mapped ::ffff:127.0.0.1, 127.0.0.2, the Pod's 10.1.2.3 and fd00::5.
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainhook.reading.discovery import listeners
from drainhook.reading.discovery.listeners import (
    Listener,
    candidates,
    parse_proc_net,
    read_listeners,
)

FIXTURE = Path(__file__).resolve().parent / "proc_net"
TCP = (FIXTURE / "tcp").read_text()
TCP6 = (FIXTURE / "tcp6").read_text()


def L(address: str, port: int) -> Listener:
    return Listener(ipaddress.ip_address(address), port)


def proc_line(
    address: str,
    port: int,
    state: int = 0x0A,
    byteorder: Literal["little", "big"] = sys.byteorder,
) -> str:
    """A /proc/net line as the kernel writes it on a host of `byteorder`."""
    raw = ipaddress.ip_address(address).packed
    words = "".join(
        f"{int.from_bytes(raw[i : i + 4], byteorder):08X}" for i in range(0, len(raw), 4)
    )
    zero = "0" * len(words)
    return (
        f"   0: {words}:{port:04X} {zero}:0000 {state:02X} 00000000:00000000 "
        "00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0"
    )


def urls(found: listeners.Candidates) -> list[str]:
    return list(found.urls("http", "/metrics"))


# ---- parsing -------------------------------------------------------------------


def test_ipv4_fixture_lists_each_listener_once_and_no_connection() -> None:
    assert parse_proc_net(TCP, "little") == (
        L("0.0.0.0", 65535),
        L("0.0.0.0", 15021),
        L("127.0.0.1", 30000),
        L("127.0.0.2", 7000),
        L("10.1.2.3", 8080),
        L("0.0.0.0", 8000),  # two SO_REUSEPORT sockets: one listener
    )  # the two ESTABLISHED lines of 127.0.0.1:30000 are not listeners


def test_ipv6_fixture_words_and_ipv4_mapped_addresses() -> None:
    assert parse_proc_net(TCP6, "little") == (
        L("127.0.0.1", 9000),  # ::ffff:127.0.0.1, unwrapped
        L("::", 15090),
        L("::1", 30001),
        L("::", 8000),
        L("fd00::5", 8081),
    )


def test_the_hosts_byte_order_decides_how_words_read() -> None:
    assert parse_proc_net(proc_line("127.0.0.1", 8000, byteorder="big"), "big") == (
        L("127.0.0.1", 8000),
    )
    assert parse_proc_net(proc_line("fd00::5", 8081, byteorder="big"), "big") == (
        L("fd00::5", 8081),
    )
    # The same text read in the other order is another address, not an error.
    assert parse_proc_net(proc_line("127.0.0.1", 8000, byteorder="big"), "little") == (
        L("1.0.0.127", 8000),
    )


@pytest.mark.parametrize("state", [0x01, 0x06, 0x07, 0x08, 0x0B, 0x0C])
def test_only_the_listen_state_counts(state: int) -> None:
    assert parse_proc_net(proc_line("0.0.0.0", 8000, state)) == ()
    assert parse_proc_net(proc_line("0.0.0.0", 8000, 0x0A)) == (L("0.0.0.0", 8000),)


def test_every_cut_of_a_real_line_is_the_listener_or_nothing() -> None:
    for text, want in ((TCP, L("0.0.0.0", 65535)), (TCP6, L("127.0.0.1", 9000))):
        line = text.splitlines()[1]
        results = {parse_proc_net(line[:n], "little") for n in range(len(line) + 1)}
        assert results == {(), (want,)}
        # Cut anywhere before the end of the state field: nothing.
        assert parse_proc_net(line[: line.index(" 0A ") + 2], "little") == ()


@pytest.mark.parametrize(
    "line",
    [
        "",
        "garbage",
        "   0: 0100007G:1F40 00000000:0000 0A 00000000:00000000",  # not hex
        "   0: 0100007F:1F40X 00000000:0000 0A",  # port of five characters
        "   0: 0100007F:0000 00000000:0000 0A",  # port 0
        "   0: 0100007F1F40 00000000:0000 0A",  # no colon
        "   0: 0100007F: 00000000:0000 0A",  # no port
        "   0: 00007F:1F40 00000000:0000 0A",  # six hex digits
        "   0: 0000000000000000000000000100007F00:1F40 0:0 0A",  # 34
        "   0: 0100007F:1F40 00000000:0000 A",  # one-digit state
        "   0: 0100007F:1F40 00000000:0000 0x",
        "   0: ０１００００７Ｆ:1F40 00000000:0000 0A",  # full-width digits
        "   0: 0100007F:+F40 00000000:0000 0A",
        "   0: 0100007F:1_40 00000000:0000 0A",
        "0100007F:1F40 00000000:0000 0A 00000000:00000000",  # no slot number
        "\x00\xff\ufffd 0: 0100007F:1F40",
    ],
)
def test_malformed_lines_are_skipped(line: str) -> None:
    good = proc_line("127.0.0.1", 8000)
    assert parse_proc_net(line) == ()
    assert parse_proc_net(f"{line}\n{good}\n{line}") == (L("127.0.0.1", 8000),)


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from("0123456789ABCDEFabcdefx:: \n\t\r\x00é"), max_size=400))
def test_any_text_parses_without_raising(text: str) -> None:
    for listener in parse_proc_net(text):
        assert 1 <= listener.port <= 65535


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(st.integers(0, len(TCP6)), st.binary(max_size=40))
def test_real_text_with_bytes_spliced_in_never_raises(at: int, junk: bytes) -> None:
    text = TCP6[:at] + junk.decode("latin-1") + TCP6[at:]
    found = set(parse_proc_net(text, "little"))
    # Lines the splice did not touch still parse.
    assert len(found & set(parse_proc_net(TCP6, "little"))) >= 3


# ---- reading /proc -------------------------------------------------------------


def test_read_listeners_reads_both_files(tmp_path: Path) -> None:
    head = "  sl  local_address rem_address   st\n"
    (tmp_path / "tcp").write_text(head + proc_line("0.0.0.0", 8000) + "\n")
    (tmp_path / "tcp6").write_text(head + proc_line("::1", 30001) + "\n")
    assert read_listeners(tmp_path) == (L("0.0.0.0", 8000), L("::1", 30001))


def test_read_listeners_without_ipv6_or_without_proc(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text(proc_line("0.0.0.0", 8000) + "\n")
    assert read_listeners(tmp_path) == (L("0.0.0.0", 8000),)
    assert read_listeners(tmp_path / "absent") == ()
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "tcp").mkdir()  # a directory where a file should be
    assert read_listeners(tmp_path / "dir") == ()


def test_read_listeners_stops_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, last = proc_line("0.0.0.0", 8000), proc_line("0.0.0.0", 9000)
    (tmp_path / "tcp").write_text(f"{first}\n{'x' * 500}\n{last}\n")
    assert read_listeners(tmp_path) == (L("0.0.0.0", 8000), L("0.0.0.0", 9000))
    monkeypatch.setattr(listeners, "MAX_FILE_BYTES", len(first) + 100)
    assert read_listeners(tmp_path) == (L("0.0.0.0", 8000),)


def test_read_listeners_of_this_process_does_not_raise() -> None:
    for listener in read_listeners():
        assert 1 <= listener.port <= 65535


# ---- the reads planned ---------------------------------------------------------


def fixture_listeners() -> tuple[Listener, ...]:
    return parse_proc_net(TCP, "little") + parse_proc_net(TCP6, "little")


def test_fixture_reads_loopback_first_each_port_once() -> None:
    found = candidates(fixture_listeners())
    assert urls(found) == [
        "http://127.0.0.2:7000/metrics",  # a single loopback address: that address
        "http://127.0.0.1:8000/metrics",  # 0.0.0.0 (twice) and ::, read once
        "http://127.0.0.1:9000/metrics",  # ::ffff:127.0.0.1
        "http://127.0.0.1:15021/metrics",
        "http://[::1]:15090/metrics",  # :: alone
        "http://127.0.0.1:30000/metrics",
        "http://[::1]:30001/metrics",
        "http://127.0.0.1:65535/metrics",
        "http://10.1.2.3:8080/metrics",  # the Pod's own addresses, on themselves
        "http://[fd00::5]:8081/metrics",
    ]
    assert found.left_out == ()
    by_port = {e.port: e.listeners for e in found.endpoints}
    assert by_port[8000] == (L("0.0.0.0", 8000), L("::", 8000))


def test_scheme_and_path_are_the_callers() -> None:
    found = candidates([L("::", 8443)])
    assert found.urls("https", "/v1/metrics?x=1") == ("https://[::1]:8443/v1/metrics?x=1",)


@pytest.mark.parametrize(
    ("group", "want"),
    [
        (["::"], "http://[::1]:8000/metrics"),
        (["::1"], "http://[::1]:8000/metrics"),
        (["::", "::1"], "http://[::1]:8000/metrics"),
        (["::", "0.0.0.0"], "http://127.0.0.1:8000/metrics"),
        (["::1", "127.0.0.1"], "http://127.0.0.1:8000/metrics"),
        (["::", "127.0.0.1"], "http://127.0.0.1:8000/metrics"),
        (["0.0.0.0", "127.0.0.1"], "http://127.0.0.1:8000/metrics"),
    ],
)
def test_one_read_per_port_over_loopback(group: list[str], want: str) -> None:
    assert urls(candidates([L(a, 8000) for a in group])) == [want]


def test_single_addresses_are_read_each_on_itself() -> None:
    found = candidates([L("0.0.0.0", 8000), L("10.1.2.3", 8000), L("10.1.2.4", 8000)])
    assert urls(found) == [
        "http://127.0.0.1:8000/metrics",
        "http://10.1.2.3:8000/metrics",
        "http://10.1.2.4:8000/metrics",
    ]


def test_link_local_ipv6_is_skipped() -> None:
    assert urls(candidates([L("fe80::1", 8000), L("::", 9000)])) == ["http://[::1]:9000/metrics"]


@pytest.mark.parametrize(
    ("exclude", "gone"),
    [
        ([("127.0.0.1", 8000)], "http://127.0.0.1:8000/metrics"),
        ([("localhost", 30000)], "http://127.0.0.1:30000/metrics"),
        ([("LOCALHOST.", 30000)], "http://127.0.0.1:30000/metrics"),
        ([("::ffff:127.0.0.1", 9000)], "http://127.0.0.1:9000/metrics"),
        ([("[::1]", 15090)], "http://[::1]:15090/metrics"),
        ([("10.1.2.3", 8080)], "http://10.1.2.3:8080/metrics"),
    ],
)
def test_configured_targets_are_not_read_again(exclude: list[tuple[str, int]], gone: str) -> None:
    every = urls(candidates(fixture_listeners()))
    left = urls(candidates(fixture_listeners(), exclude=exclude))
    assert gone in every
    assert left == [u for u in every if u != gone]


@pytest.mark.parametrize(
    "exclude",
    [[("::1", 8000)], [("127.0.0.1", 8001)], [("engine.local", 8000)], [("0.0.0.0", 8000)]],
)
def test_other_targets_exclude_nothing(exclude: list[tuple[str, int]]) -> None:
    assert candidates(fixture_listeners(), exclude=exclude) == candidates(fixture_listeners())


def test_at_most_64_reads_loopback_first_then_by_port() -> None:
    many = [L("0.0.0.0", p) for p in range(40000, 40070)]  # 70 wildcard ports
    pod = [L("10.1.2.3", 80), L("::", 9)]
    found = candidates([*reversed(many), *pod])
    assert len(found.endpoints) == 64
    assert found.endpoints[0].port == 9  # loopback reads first, by port
    assert [e.port for e in found.endpoints[1:]] == list(range(40000, 40063))
    assert [(e.host, e.port) for e in found.left_out] == [
        *(("127.0.0.1", p) for p in range(40063, 40070)),
        ("10.1.2.3", 80),  # a single non-loopback address comes after every loopback read
    ]


def test_the_limit_is_applied_after_the_exclusions() -> None:
    many = [L("0.0.0.0", p) for p in range(1, 66)]  # 65 ports
    found = candidates(many, exclude=[("127.0.0.1", 1)])
    assert [e.port for e in found.endpoints] == list(range(2, 66))
    assert found.left_out == ()
