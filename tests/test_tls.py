"""https reads end to end (CONTRACT §6): a loopback listener is read unverified,
`--cacert` verifies against that CA and the name sent, and every TLS failure is
`unreachable` at once, never a hang and never a traceback."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme

from tests.conftest import SPAWN_LATE, late
from tests.support.logs import fields
from tests.support.loopback import Loopback, plain_http, sample, serve
from tests.support.process import NO_HOLD, Hook, Run

IDLE = sample("vllm-single-dp2-idle.txt")
# D = 3 - 0.5 = 2.5 s; an idle engine drains at about settle + interval = 0.2 s.
TIMELINE = ("--settle", "0.1", "--interval", "0.1", "--grace", "3", "--exit-reserve", "0.5")
DEADLINE = 2.5


@dataclass
class Pki:
    """A CA written to ca.pem, a stranger CA written to other-ca.pem."""

    ca: trustme.CA
    cacert: Path
    other_cacert: Path
    names_sent: list[str | None] = field(default_factory=list)

    def server(self, name: str) -> ssl.SSLContext:
        """A server context with a cert for `name`, recording the SNI it is sent."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ca.issue_cert(name).configure_cert(ctx)

        def note(_sock: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> None:
            self.names_sent.append(server_name)

        ctx.sni_callback = note
        return ctx


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = trustme.CA()
    cacert = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cacert))
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    return Pki(ca, cacert, other)


def wait_https(hook: Hook, url: str, *args: str, env: dict[str, str] | None = None) -> Run:
    return hook("wait", "--url", url, *TIMELINE, *args, env=env)


def assert_drained(run: Run, connections: int) -> None:
    assert run.code == 0, run.stderr
    assert "outcome=drained" in run.summary
    assert "reads=2" in run.summary
    assert connections == 2
    assert run.elapsed < late(0.2, SPAWN_LATE, run.starved)  # settle + interval, not D


def assert_held(run: Run, connections: int, *words: str) -> None:
    """A wrong target (CONTRACT §2): held to D like the blind sleep, read every I (each
    read failing at once, never waiting out a timeout), the TLS reason and its fix named,
    and its own outcome: `misconfigured`, exit 6 (fix the flags, not G)."""
    assert run.code == 6, run.stderr
    assert "outcome=misconfigured" in run.summary
    reads = int(fields(run.summary)["reads"])
    assert connections >= 0.5 * (DEADLINE - 0.1) / 0.1  # about one an I, S to D
    # One connection a read; the last read may be one D cut short before it connected.
    assert connections <= reads <= connections + 1
    reasons = [fields(line)["reason"] for line in run.lines if " read=" in line]
    said = reasons[0]
    assert said.startswith("misconfigured: cannot connect: TLS ") and "check --scheme" in said
    assert set(reasons[:-1]) == {said}  # (the last read may be the one D cut short)
    for word in words:
        assert word in said
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("cert_env", [False, True], ids=["plain-env", "SSL_CERT_FILE-missing"])
def test_loopback_https_without_cacert_is_read_unverified(
    hook: Hook, pki: Pki, tmp_path: Path, cert_env: bool
) -> None:
    # The cert names drain.test and is signed by a CA nobody trusts: only an
    # unverified read can drain. SSL_CERT_FILE naming a missing file must not
    # matter: no trust store is loaded for a loopback read.
    missing = str(tmp_path / "no-such-bundle.pem")
    env = {"SSL_CERT_FILE": missing, "SSL_CERT_DIR": missing} if cert_env else None
    with Loopback(serve(IDLE), tls=pki.server("drain.test")) as srv:
        assert srv.url.startswith("https://127.0.0.1:")
        run = wait_https(hook, srv.url, env=env)
    assert_drained(run, srv.connections)


def test_cacert_and_server_name_verify_the_listener(hook: Hook, pki: Pki) -> None:
    with Loopback(serve(IDLE), tls=pki.server("drain.test")) as srv:
        run = wait_https(
            hook, srv.url, "--cacert", str(pki.cacert), "--tls-server-name", "drain.test"
        )
    assert_drained(run, srv.connections)
    # the two reads, and a GET /load after each idle one: missing (404) is asked
    # again on every read (CONTRACT §2a)
    assert pki.names_sent == ["drain.test"] * (2 + srv.side_reads) and srv.side_reads == 2


@pytest.mark.reads
def test_cert_for_another_name_holds(hook: Hook, pki: Pki) -> None:
    with Loopback(serve(IDLE), tls=pki.server("other.test")) as srv:
        run = wait_https(
            hook, srv.url, "--cacert", str(pki.cacert), "--tls-server-name", "drain.test"
        )
    assert_held(run, srv.connections, "TLS verification failed", "drain.test")


@pytest.mark.reads
def test_cert_from_another_ca_holds(hook: Hook, pki: Pki) -> None:
    with Loopback(serve(IDLE), tls=pki.server("drain.test")) as srv:
        run = wait_https(
            hook, srv.url, "--cacert", str(pki.other_cacert), "--tls-server-name", "drain.test"
        )
    assert_held(run, srv.connections, "TLS verification failed")


@pytest.mark.reads
def test_https_against_plain_http_listener_holds(hook: Hook) -> None:
    # The listener answers the ClientHello with an HTTP 400, as uvicorn does: the
    # handshake fails at once, it does not time out; the wrong scheme holds (§2).
    with Loopback(plain_http(IDLE)) as srv:
        run = wait_https(hook, srv.url.replace("http://", "https://", 1))
    assert_held(run, srv.connections, "TLS handshake failed")


def test_localhost_url_sends_and_verifies_localhost(hook: Hook, pki: Pki) -> None:
    # The cert has no IP SAN: verification passes only if `localhost` is the
    # name sent and checked, while 127.0.0.1 is what is connected to.
    with Loopback(serve(IDLE), tls=pki.server("localhost")) as srv:
        url = f"https://localhost:{srv.port}/metrics"
        run = wait_https(hook, url, "--cacert", str(pki.cacert))
    assert_drained(run, srv.connections)
    assert pki.names_sent == ["localhost"] * (2 + srv.side_reads) and srv.side_reads == 2
    assert f"target={url}" in run.summary


@pytest.mark.parametrize("content", [None, b"not a certificate\n"], ids=["missing", "not-pem"])
def test_unusable_cacert_is_a_one_line_usage_error(
    hook: Hook, pki: Pki, tmp_path: Path, content: bytes | None
) -> None:
    cacert = tmp_path / "bundle.pem"
    if content is not None:
        cacert.write_bytes(content)
    with Loopback(serve(IDLE), tls=pki.server("drain.test")) as srv:
        run = wait_https(hook, srv.url, "--cacert", str(cacert), *NO_HOLD)
    assert run.code == 2, run.stderr
    assert len(run.lines) == 1, run.stderr
    assert "--cacert" in run.stderr and str(cacert) in run.stderr
    assert srv.connections == 0


def test_probe_json_over_verified_tls(hook: Hook, pki: Pki) -> None:
    with Loopback(serve(IDLE), tls=pki.server("localhost")) as srv:
        url = f"https://localhost:{srv.port}/metrics"
        run = hook("probe", "--json", "--url", url, "--cacert", str(pki.cacert))
    assert run.code == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["schema"] == 1
    assert out["target"] == url
    assert (out["engine"], out["verdict"], out["reason"], out["in_flight"]) == (
        "vllm",
        "idle",
        None,
        0,
    )
    assert out["series"], "an idle vLLM body has counted series"
    assert srv.connections == 1


def test_probe_json_tls_failure_is_a_wrong_target(hook: Hook, pki: Pki) -> None:
    with Loopback(serve(IDLE), tls=pki.server("other.test")) as srv:
        url = f"https://localhost:{srv.port}/metrics"
        run = hook("probe", "--json", "--url", url, "--cacert", str(pki.cacert))
    assert run.code == 3, run.stderr
    out = json.loads(run.stdout)
    assert (out["verdict"], out["in_flight"], out["series"]) == ("unknown", None, [])
    assert out["reason"].startswith("misconfigured: ")
    assert "TLS verification failed" in out["reason"]
    assert srv.connections == 1
