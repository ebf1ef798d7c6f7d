"""Where the hook reads: the metrics URL, the loopback rule and TLS (CONTRACT §4, §6).

Nothing here opens a connection: `Target` is checked before the first read.
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import os
import re
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import SplitResult, quote, unquote, urlsplit, urlunsplit

from drainhook.errors import UsageError

Scheme = Literal["http", "https"]
# A CA bundle: a distribution's whole store is under 1 MiB.
CACERT_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Target:
    """One metrics URL, split into what is connected to and what is shown."""

    url: str  # as given, userinfo included (sent as basic auth, never shown)
    scheme: Scheme
    host: str  # as given (a name or a literal), without brackets
    port: int
    path: str  # path and query

    @property
    def display(self) -> str:
        """The URL without userinfo: the only form that is ever printed."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return urlunsplit((self.scheme, f"{host}:{self.port}", self.path, "", ""))

    @property
    def connect_host(self) -> str:
        """The address connected to. `localhost` is 127.0.0.1 and is never looked up,
        so an /etc/hosts entry cannot send a loopback-only read elsewhere (RFC 6761);
        a name is sent and looked up in its IDNA (ASCII) form."""
        return "127.0.0.1" if _is_localhost(self.host) else self.sent_host

    @property
    def sent_host(self) -> str:
        """The host as it is sent (Host header, TLS server name): a name in its
        IDNA (ASCII) form, a literal as it is."""
        return _wire_host(self.host) or self.host

    @property
    def host_header(self) -> str:
        """The Host header: the host as sent, bracketed where IPv6, with its port."""
        host = self.sent_host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def request_target(self) -> bytes:
        """The request line's target: path and query, percent-encoded where a
        request line cannot carry a character as it is (a space, non-ASCII)."""
        return quote(self.path, safe=_TARGET_SAFE).encode("ascii")

    @property
    def basic_auth(self) -> str | None:
        """The Authorization value the URL's userinfo stands for (`Basic ...`), or
        None without userinfo. Sent, never shown."""
        auth = urlsplit(self.url).netloc.rpartition("@")[0]
        user, _, password = auth.partition(":")
        if not (user or password):
            return None
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")

    @property
    def in_pod(self) -> bool:
        """Loopback, or an address an interface of the hook's own network namespace
        holds (the Pod's IP, for an engine bound to it alone): CONTRACT §6."""
        return self.is_loopback or held_by(self.host) not in (None, IPVS_DUMMY)

    @property
    def is_loopback(self) -> bool:
        if _is_localhost(self.host):
            return True
        try:
            addr = ipaddress.ip_address(self.host)
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            return addr.ipv4_mapped.is_loopback
        return addr.is_loopback

    def with_path(self, path: str) -> Target:
        """This listener, another path (`probe --source both`: /v1/loads beside /metrics)."""
        url = build_url(self.scheme, self.host, self.port, path)
        return dataclasses.replace(self, path=path, url=url)


# kube-proxy in IPVS mode binds every ClusterIP to this dummy interface of a
# hostNetwork Pod's namespace; netfilter sends what reaches one to any replica.
IPVS_DUMMY = "kube-ipvs0"


def held_by(host: str) -> str | None:
    """The interface of this network namespace that holds `host`, an IP literal, as the
    kernel says (drainhook.reading.addresses: what it delivers locally, not a table that
    merely lists it); None when none does, or the kernel cannot be asked."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    from drainhook.reading.addresses import local_addresses  # never for loopback

    try:
        return local_addresses().get(addr)
    except OSError:
        return None


def _is_localhost(host: str) -> bool:
    return host.lower().rstrip(".") == "localhost"


# What a request target keeps as it is: RFC 3986's pchar and query characters,
# and `%`, so that what is already percent-encoded is sent as given.
_TARGET_SAFE = "/?:@!$&'()*+,;=-._~%"
_LDH = re.compile(r"[A-Za-z0-9._-]+")


def _wire_host(host: str) -> str | None:
    """A host name in the ASCII form sent and looked up (IDNA), or None where it
    has none (then parse_url refuses it). An IP literal is returned as it is."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        ascii_name = host.encode("idna").decode("ascii")
    except UnicodeError:
        return None
    return ascii_name if _LDH.fullmatch(ascii_name) else None


def parse_url(url: str) -> Target:
    """Split and check a metrics URL (`http` or `https`, a host, an optional port)."""
    try:
        parts: SplitResult = urlsplit(url.strip())
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise UsageError(f"invalid URL {_redact(url)!r}: {_why(exc)}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise UsageError(f"URL {_redact(url)!r} must start with http:// or https://")
    scheme: Scheme = "https" if parts.scheme.lower() == "https" else "http"
    if not host:
        raise UsageError(f"URL {_redact(url)!r} has no host")
    if _wire_host(host) is None:
        raise UsageError(f"invalid URL {_redact(url)!r}: the host is not a name or an address")
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        # A password with a raw `/`, `?` or `#` (a base64 token) ends the host
        # early: its tail would be shown as the path, and read from another host.
        raise UsageError(
            f"URL {_redact(url)!r} has an '@' after its host: percent-encode a password's "
            "'/', '?' or '#' (%2F, %3F, %23)"
        )
    if port is None:
        port = 443 if scheme == "https" else 80
    if port == 0:
        raise UsageError(f"URL {_redact(url)!r} names port 0: no listener has it")
    path = parts.path or "/metrics"  # a URL with no path: the engines' metrics path (§2)
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(url.strip(), scheme, host, port, path)


# `$(NAME)`: a value Kubernetes left as written, its variable defined after the one
# that names it (an operator's, appended to the container's env: Kthena's ENTRY_ADDRESS).
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def check_host(host: str, environ: Mapping[str, str] = os.environ) -> str:
    """`--host` as given (`$(NAME)`: NAME's value here, CONTRACT §4), or a usage error
    for what is not a host name or an address (a `/`, `?`, `#`, `@` or blank would move
    the port into the path: CONTRACT §5), or a `$(NAME)` whose NAME is unset or empty
    (a worker that read no leader would release at once)."""
    if m := _REFERENCE.fullmatch(host):
        host = environ.get(m.group(1), "")
        if not host:
            raise UsageError(
                f"--host is {m.group(0)}, and {m.group(1)} is unset or empty in the hook's "
                "environment: no host to read"
            )
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not bare or any(c in bare for c in "/?#@ \t\n") or _wire_host(bare) is None:
        raise UsageError(f"--host {host[:80]!r} is not a host name or an address")
    return host


def build_url(scheme: Scheme, host: str, port: int, path: str) -> str:
    """A URL from its parts, bracketing an IPv6 literal; an empty path (`--path ''`)
    reads /metrics, as a URL with none does (CONTRACT §2)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    if not path.startswith("/"):
        path = "/" + (path or "metrics")
    return f"{scheme}://{host}:{port}{path}"


def _redact(url: str) -> str:
    """A URL with any userinfo replaced, for error messages: everything up to the
    last `@`, since a password may hold a raw `/`, `?` or `#` that ends the host
    early for a URL parser."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url.rpartition("@")[2]
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    return f"{scheme}{sep}{rest}"


def _why(exc: ValueError) -> str:
    """urlsplit's complaint, without the text it quotes (a port that is the
    start of a password)."""
    text = str(exc)
    if text.startswith("Port"):
        return "the port is not a number from 0 to 65535"
    if "IPv6" in text:
        return "invalid IPv6 address"
    return "malformed"


def read_small_file(path: Path, cap: int, what: str) -> bytes:
    """A regular file's contents, at most cap bytes, opened without blocking: a
    FIFO or a device named by mistake is refused at once, not waited on (a
    FIFO's open blocks until a writer comes) or read without end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None
    # Checked before fdopen, which raises IsADirectoryError for a directory.
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError as exc:
        os.close(fd)
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not regular:
        os.close(fd)
        raise UsageError(f"cannot read {what} {path}: not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(cap + 1)
        except OSError as exc:
            raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None
    if len(data) > cap:
        raise UsageError(f"{what} {path} is over {cap} bytes")
    return data


def ssl_context(target: Target, cacert: Path | None, insecure: bool) -> ssl.SSLContext | None:
    """The TLS context of an https target (None for http): `--cacert` alone, or, without
    it, a listener in the Pod (loopback, or its own address) unverified and a remote one
    verified against the system store unless `--insecure`; SSL_CERT_FILE is read only
    for that last."""
    if target.scheme != "https":
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cacert is not None:
        # Read once here to refuse a FIFO, a device or an outsized file; OpenSSL
        # then loads it by name (it reads CRLs and TRUSTED CERTIFICATE blocks too).
        read_small_file(cacert, CACERT_MAX_BYTES, "--cacert")
        try:
            ctx.load_verify_locations(cafile=str(cacert))
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"cannot load --cacert {cacert}: {exc}") from None
        return ctx
    if target.in_pod or insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx.load_default_certs()
    return ctx
