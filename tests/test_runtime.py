"""The packaged hook in a real container runtime (podman with runc), delivered each
way `inject --via` writes, the kubelet's sequence played through the runtime
(tests/support/runtime.py): exec the preStop hook in the engine container,
SIGTERM to its PID 1 when the hook returns, SIGKILL at G.

The engine container is hardened as a restricted Pod (every capability
dropped, no new privileges, the default seccomp profile, uid 65534, a
read-only root with no writable /tmp, no network but its loopback). In it the hook must still read
each of its signals: the live request below is held first by its connection
alone (its body half sent), then by the HTTP server before the scheduler has it
(vLLM's /load: the render; its connection too), then by the scheduler's gauges
(the stream); a hook that missed any window would release with the request in
flight. The hook's lines reach the container's log through --log-file
/proc/1/fd/1, as `kubectl logs` shows them.

They replace the chroot row `nobody` of tests/test_roots.py (uid 65534, a
read-only root, no /tmp, no HOME) on this machine's architecture; it stays for
the emulated one, which has no runtime here. Needs root, podman, runc and buildah, the
directory build (DRAINHOOK_BINARY) and the Dockerfile's images in local
storage (scripts/test as root makes them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import HOOK_LATE, POD_LATE, late
from tests.support import runtime
from tests.support.logs import events

BINARY = os.environ.get("DRAINHOOK_BINARY", "")
WHY_NOT = runtime.usable() or (None if BINARY else "no build: DRAINHOOK_BINARY is unset")
if WHY_NOT is None and not runtime.exists(runtime.IMAGE):
    WHY_NOT = f"no {runtime.IMAGE} (scripts/build-image makes it)"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]

G, S, INTERVAL = 12, 1.0, 0.5  # grace, settle, interval: D = G - 5 = 7
D = G - 5.0
FLAGS = ["--grace", str(G), "--settle", str(S), "--interval", str(INTERVAL), "--log-format", "json"]
UPLOAD, RENDER, STREAM = 2.5, 1.0, 1.0  # the live request's windows, seconds
# The engine: vLLM-shaped, with --enable-server-load-tracking (which inject adds).
ENGINE = ["--kind", "vllm", "--load-tracking", "--render", f"uniform:{RENDER}:{RENDER}"]
ENGINE += ["--durations", f"uniform:{STREAM}:{STREAM}"]
MANIFEST = f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: engine
spec:
  template:
    spec:
      terminationGracePeriodSeconds: {G}
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.11.0
        args: ["--model", "m", "--port", "8000"]
"""
VIA = {
    "image": ["--via", "image", "--binary", "/opt/drainhook/drainhook"],
    "image-volume": ["--via", "image-volume", "--image", runtime.IMAGE],
    "init": ["--via", "init", "--image", runtime.IMAGE],
}
# A request whose body arrives in two parts, UPLOAD seconds apart; then it is read to
# its end. Prints SENT once the first part is out, then its outcome and end time.
CLIENT = """
import http.client, json, sys, time
body = json.dumps({"user": "live", "prompt": "x", "max_tokens": 8, "stream": True}).encode()
conn = http.client.HTTPConnection("127.0.0.1", 8000, timeout=30)
conn.putrequest("POST", "/v1/completions")
conn.putheader("Content-Type", "application/json")
conn.putheader("Content-Length", str(len(body)))
conn.endheaders(body[:5])
print("SENT", flush=True)
time.sleep(float(sys.argv[1]))
conn.send(body[5:])
response = conn.getresponse()
text = response.read().decode()
finished = '"finish_reason": "length"' in text and text.endswith("data: [DONE]\\n\\n")
print(response.status, finished, time.monotonic(), flush=True)
"""


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    """The engine image without the hook, and with the build copied in (--via image)."""
    build = Path(BINARY).parent
    return {"plain": runtime.engine_image(None), "image": runtime.engine_image(build)}


@pytest.fixture(params=list(VIA))
def pod(
    request: pytest.FixtureRequest, images: dict[str, str], tmp_path: Path
) -> Iterator[runtime.Pod]:
    via: str = request.param
    injected = runtime.inject(MANIFEST, *VIA[via])
    image = images["image" if via == "image" else "plain"]
    with runtime.pod(injected, image, ENGINE, tmp_path) as p:
        yield p


def summary(kubelet: runtime.Kubelet) -> dict[str, object]:
    found = events(kubelet.hook_stderr, "summary")
    assert len(found) == 1, kubelet.hook_stderr
    return found[0]


def test_drains_a_live_stream_held_by_each_signal_in_turn(pod: runtime.Pod) -> None:
    client = pod.exec("python3", "-c", CLIENT, str(UPLOAD))
    assert client.stdout is not None
    assert client.stdout.readline().strip() == "SENT", client.communicate()
    kubelet = pod.delete(G, FLAGS)
    out, err = client.communicate(timeout=30)
    status, finished, ended_s = out.split()
    ended = float(ended_s)
    # The request was served whole: HTTP 200, its last event, then [DONE].
    assert (status, finished) == ("200", "True"), (out, err)
    # The hook returned drained after the stream ended (and confirmed it), before D.
    assert kubelet.hook_exit == 0, kubelet.hook_stderr
    assert summary(kubelet)["outcome"] == "drained"
    assert ended <= kubelet.returned_at <= late(ended + INTERVAL, POD_LATE)
    # Each signal held the request in its window: the connection alone (the body half
    # sent), the server's count before the scheduler had it (the render: the
    # connection, dumped on every read, holds it too), then the scheduler.
    reads = events(kubelet.hook_stderr, "read")
    held = [set(r["held_by"] or ()) for r in reads]
    assert {"connections"} in held, reads
    assert any("server" in h and "scheduler" not in h for h in held), reads
    assert any("scheduler" in h for h in held), reads
    # The engine exited by itself after SIGTERM; the hook's lines are in its log.
    assert (kubelet.engine_exit, kubelet.sigkill) == (0, False)
    assert events(kubelet.logs, "summary") == [summary(kubelet)]


def test_releases_an_idle_engine(pod: runtime.Pod) -> None:
    kubelet = pod.delete(G, FLAGS)
    assert kubelet.hook_exit == 0, kubelet.hook_stderr
    found = summary(kubelet)
    assert (found["outcome"], found["reads"]) == ("drained", 2)
    assert S <= float(found["elapsed"]) <= late(S + INTERVAL, HOOK_LATE)
    assert (kubelet.engine_exit, kubelet.sigkill) == (0, False)
    assert kubelet.engine_ended <= late(S + INTERVAL + 1.0, POD_LATE)


def test_another_uid_cannot_read_the_engine_and_a_wrong_port_holds(
    images: dict[str, str], tmp_path: Path
) -> None:
    """The hook under uid 65533, the engine under 65534: the engine's descriptors are
    unreadable, so a refused port cannot show the engine gone (CONTRACT §2)."""
    injected = runtime.inject(MANIFEST, *VIA["image"])
    with runtime.pod(injected, images["image"], ENGINE, tmp_path) as p:
        denied = p.exec("ls", "/proc/1/fd", user=65533)
        denied.communicate(timeout=30)
        assert denied.returncode != 0  # the descriptors are unreadable indeed
        kubelet = p.delete(G, [*FLAGS, "--port", "8001"], user=65533)
    assert kubelet.hook_exit == 6, kubelet.hook_stderr
    found = summary(kubelet)
    assert found["outcome"] == "misconfigured"
    reason = str(found["reason"])
    assert reason.startswith("misconfigured: connection refused; TCP ports 8000 listen"), reason
    assert "unreadable" in reason
    assert float(found["deadline"]) == D
    assert D - 0.1 <= float(found["elapsed"]) <= late(D, HOOK_LATE)
    assert (kubelet.engine_exit, kubelet.sigkill) == (0, False)


def test_the_runtime_is_the_hardened_one(images: dict[str, str], tmp_path: Path) -> None:
    """What the cases above run under: no capability, no new privileges, a seccomp
    filter, uid 65534 with no HOME, a read-only root and /tmp."""
    injected = runtime.inject(MANIFEST, *VIA["image"])
    with runtime.pod(injected, images["image"], ENGINE, tmp_path) as p:
        shown = p.exec("sh", "-c", "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/1/status")
        out, _ = shown.communicate(timeout=30)
        for folder in ("/srv/engine", "/tmp", "$HOME"):
            wrote = p.exec("sh", "-c", f"touch {folder}/x")
            wrote.communicate(timeout=30)
            assert wrote.returncode != 0, folder
    assert out.split() == ["65534", "CapEff:", "0" * 16, "NoNewPrivs:", "1", "Seccomp:", "2"]
