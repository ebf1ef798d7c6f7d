"""`inject` over a directory of mixed real-shaped manifests (tests/manifests/mixed/):
the diff a reviewer reads holds the wiring and nothing else. Untouched lines stay
as they were (a plain script continued over two lines, flow mappings padded by
hand, either sequence style, comments), line endings stay (CRLF), a document
with nothing to wire comes back byte for byte; the only lines taken away are
the ones the wiring replaces (CONTRACT §4)."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.injecting import validate
from tests.support.process import ROOT, base_env

MIXED = ROOT / "tests" / "manifests" / "mixed"
BIN = "/usr/local/bin/drainhook"  # --via image: the images hold it there

# Each file's lines that the wiring takes away, exactly (all others must stay).
REMOVED = {
    "configmap.yaml": [],
    "kubectl-list.yaml": [],
    "llm-d-decode.yaml": ["            sleep: {seconds: 15}\n"],
    "production-stack.yaml": [
        '          args: ["--model", "meta-llama/Llama-3.1-8B", "--port", "8000"]   # the engine\n',
        '                command: ["/bin/sh", "-c", "sleep 30"]\n',
    ],
    "sglang-crlf.yaml": [],
}


def inject(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "drainhook", "inject", "--via", "image", "--binary", BIN, str(path)],
        env=base_env(), capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.decode()


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_the_diff_holds_only_the_wiring(name: str) -> None:
    path = MIXED / name
    before = path.read_bytes().decode()
    after = inject(path)
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    diff = list(difflib.ndiff(old, new))
    removed = [line[2:] for line in diff if line.startswith("- ")]
    added = [line[2:] for line in diff if line.startswith("+ ")]
    # Line endings kept: a CRLF file's every line still ends in CRLF.
    assert ("\r\n" in before) == all(line.endswith("\r\n") for line in new)
    assert [line.replace("\r\n", "\n") for line in removed] == REMOVED[name]
    if name == "configmap.yaml":
        assert after == before  # nothing to wire: byte for byte
        return
    # What came in is the wiring: the hook, and only where a container's spec is.
    assert any("/usr/local/bin/drainhook" in line for line in added)
    assert all(not line.strip().startswith("#") for line in added)  # no comment rewritten
    # Each document is still valid against Kubernetes' own schemas.
    for doc in yaml.safe_load_all(after):
        validate(doc)


def test_the_directory_comes_back_whole_and_in_order() -> None:
    """The directory as one stream: every file, in sorted order, as inject writes it
    alone, one `---` between two."""
    stream = inject(MIXED)
    alone = [inject(MIXED / name) for name in sorted(REMOVED)]
    assert stream == "---\n".join(alone)
