"""Targets: URL parsing, the loopback rule, annotations, TLS contexts."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest

from drainhook.errors import UsageError
from drainhook.reading.annotations import read_annotations
from drainhook.reading.config import ReadConfig
from drainhook.reading.target import build_url, parse_url, ssl_context


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000/metrics", True),
        ("http://127.3.4.5:8000/metrics", True),
        ("http://[::1]:8000/metrics", True),
        ("http://[::ffff:127.0.0.1]:8000/metrics", True),
        ("http://localhost:8000/metrics", True),
        ("http://LOCALHOST.:8000/metrics", True),
        ("http://10.0.0.1:8000/metrics", False),
        ("http://[::ffff:10.0.0.1]:8000/metrics", False),
        ("http://0.0.0.0:8000/metrics", False),
        ("http://localhost.example.com:8000/metrics", False),
        ("http://vllm.default.svc:8000/metrics", False),
        ("http://127.0.0.1.nip.io:8000/metrics", False),
    ],
)
def test_loopback_rule(url: str, loopback: bool) -> None:
    assert parse_url(url).is_loopback is loopback


def test_non_loopback_is_a_usage_error_unless_allowed() -> None:
    target = parse_url("http://10.0.0.1:8000/metrics")
    with pytest.raises(UsageError, match="neither loopback nor an address of this Pod"):
        ReadConfig(target).check()
    ReadConfig(target, allow_remote=True).check()


def test_localhost_is_connected_as_127_0_0_1_without_lookup() -> None:
    target = parse_url("http://localhost:9/metrics")
    assert target.connect_host == "127.0.0.1"
    assert (target.host_header, target.request_target) == ("localhost:9", b"/metrics")


def test_userinfo_is_kept_for_the_request_and_never_displayed() -> None:
    target = parse_url("https://user:s3cret@127.0.0.1:8443/m?x=1")
    assert "s3cret" not in target.display
    assert target.display == "https://127.0.0.1:8443/m?x=1"
    assert target.request_target == b"/m?x=1"
    assert target.basic_auth == "Basic " + base64.b64encode(b"user:s3cret").decode()


@pytest.mark.parametrize(
    ("userinfo", "pair"),
    [("user:s3cret", b"user:s3cret"), ("user", b"user:"), (":tok", b":tok"),
     ("u%40x:p%2Fw%3A", b"u@x:p/w:"), ("j%C3%B6rg:pw", "jörg:pw".encode())],
)  # fmt: skip
def test_userinfo_is_percent_decoded_into_basic_auth(userinfo: str, pair: bytes) -> None:
    target = parse_url(f"http://{userinfo}@127.0.0.1:9/metrics")
    assert target.basic_auth == "Basic " + base64.b64encode(pair).decode()


def test_no_userinfo_is_no_basic_auth() -> None:
    assert parse_url("http://127.0.0.1:9/metrics").basic_auth is None
    assert parse_url("http://@127.0.0.1:9/metrics").basic_auth is None


@pytest.mark.parametrize(
    ("path", "sent"),
    [("/metrics", b"/metrics"), ("/a b", b"/a%20b"), ("/m%20x?q=1&r=a:b", b"/m%20x?q=1&r=a:b"),
     ("/m\u00e9trics", b"/m%C3%A9trics")],
)  # fmt: skip
def test_the_request_target_is_percent_encoded_where_it_must_be(path: str, sent: bytes) -> None:
    target = parse_url(f"http://127.0.0.1:9{path}")
    assert target.request_target == sent


@pytest.mark.parametrize(
    ("host", "sent"),
    [("engine.test", "engine.test"), ("b\u00fccher.test", "xn--bcher-kva.test"),
     ("127.0.0.1", "127.0.0.1"), ("::1", "::1")],
)  # fmt: skip
def test_a_name_is_sent_in_its_ascii_form(host: str, sent: str) -> None:
    bracketed = f"[{host}]" if ":" in host else host
    target = parse_url(f"http://{bracketed}:9/metrics")
    assert (target.sent_host, target.connect_host) == (sent, sent)
    assert target.host_header == (f"[{sent}]:9" if ":" in sent else f"{sent}:9")


@pytest.mark.parametrize("host", ["\u2100.test", "a..b", "ex ample.test", "x" * 64 + ".test"])
def test_a_host_with_no_ascii_form_is_a_usage_error(host: str) -> None:
    with pytest.raises(UsageError, match=r"^invalid URL "):
        parse_url(f"http://{host}:9/metrics")


def test_default_ports_and_paths() -> None:
    assert parse_url("http://127.0.0.1").port == 80
    assert parse_url("https://127.0.0.1").port == 443
    assert parse_url("http://127.0.0.1").path == "/metrics"  # no path: the engines' (§2)
    assert build_url("http", "::1", 8000, "metrics") == "http://[::1]:8000/metrics"
    assert build_url("http", "::1", 8000, "") == "http://[::1]:8000/metrics"  # --path ''


@pytest.mark.parametrize(
    "url",
    ["ftp://127.0.0.1/metrics", "127.0.0.1:8000", "http://:80/", "http://127.0.0.1:99999/"],
)
def test_bad_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(UsageError):
        parse_url(url)


def test_bad_url_message_hides_userinfo() -> None:
    with pytest.raises(UsageError) as info:
        parse_url("ftp://admin:hunter2@127.0.0.1/metrics")
    assert "hunter2" not in str(info.value)


def test_annotations_file(tmp_path: Path) -> None:
    f = tmp_path / "annotations"
    f.write_text(
        'kubectl.kubernetes.io/restartedAt="2026-11-30T00:00:00Z"\n'
        'prometheus.io/path="/custom\\"x"\n'
        'prometheus.io/port="8123"\n'
        'prometheus.io/scheme="https"\n'
        'prometheus.io/scrape="true"\n'
    )
    assert read_annotations(f) == {
        "path": '/custom"x',
        "port": "8123",
        "scheme": "https",
        "scrape": "true",
    }


def test_annotations_file_is_read_with_a_cap(tmp_path: Path) -> None:
    f = tmp_path / "annotations"
    f.write_bytes(b"x" * (300 * 1024))
    with pytest.raises(UsageError, match="over"):
        read_annotations(f)


def test_missing_annotations_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        read_annotations(tmp_path / "nope")


def test_tls_context_rules(tmp_path: Path) -> None:
    assert ssl_context(parse_url("http://127.0.0.1/"), None, False) is None
    loopback = ssl_context(parse_url("https://127.0.0.1/"), None, False)
    assert loopback is not None and loopback.verify_mode == ssl.CERT_NONE
    remote = ssl_context(parse_url("https://10.0.0.1/"), None, False)
    assert remote is not None and remote.verify_mode == ssl.CERT_REQUIRED
    insecure = ssl_context(parse_url("https://10.0.0.1/"), None, True)
    assert insecure is not None and insecure.verify_mode == ssl.CERT_NONE
    with pytest.raises(UsageError, match="--cacert"):
        ssl_context(parse_url("https://127.0.0.1/"), tmp_path / "missing.pem", False)
