#!/bin/sh
# Regenerates tcp and tcp6 here: real /proc/net text from an empty network
# namespace holding the listeners below (needs unshare and ip). Run from the
# repository root:  unshare -rn sh tests/proc_net/make.sh
set -eu
ip link set lo up
ip addr add 10.1.2.3/32 dev lo
ip addr add fd00::5/128 dev lo nodad
out="$(dirname "$0")"
python3 - "$out" <<'PY'
import socket, sys, time

def listen(family, host, port, reuseport=False, v6only=None):
    s = socket.socket(family, socket.SOCK_STREAM)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if v6only is not None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
    s.bind((host, port))
    s.listen(8)
    return s

V4, V6 = socket.AF_INET, socket.AF_INET6
keep = [
    # vLLM's API servers: two processes on 0.0.0.0:8000 (SO_REUSEPORT)
    listen(V4, "0.0.0.0", 8000, reuseport=True),
    listen(V4, "0.0.0.0", 8000, reuseport=True),
    # the same port on :: (IPv6 only: a dual-stack one could not share it)
    listen(V6, "::", 8000, v6only=True),
    # SGLang's default host, and an IPv6-loopback-only listener
    listen(V4, "127.0.0.1", 30000),
    listen(V6, "::1", 30001),
    # a mesh sidecar's dual-stack admin port and a stats port on 0.0.0.0
    listen(V6, "::", 15090, v6only=False),
    listen(V4, "0.0.0.0", 15021),
    # an IPv4-mapped loopback address bound on an IPv6 socket
    listen(V6, "::ffff:127.0.0.1", 9000),
    # single addresses: a second loopback address, the Pod's IPv4 and IPv6
    listen(V4, "127.0.0.2", 7000),
    listen(V4, "10.1.2.3", 8080),
    listen(V6, "fd00::5", 8081),
    # the highest port
    listen(V4, "0.0.0.0", 65535),
]
# An established connection (and its accepted end), which is not a listener.
client = socket.create_connection(("127.0.0.1", 30000))
accepted = keep[3].accept()[0]
time.sleep(0.1)
for name in ("tcp", "tcp6"):
    with open(f"/proc/net/{name}") as src, open(f"{sys.argv[1]}/{name}", "w") as dst:
        dst.write(src.read())
PY
