"""The rehearsal (`python -m rehearsal`) run on a strong scale, for its JSON rows."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support.podns import netns
from tests.support.process import ROOT, base_env

SCALE = 0.1  # the rehearsal's --scale in the tests: its timelines shrunk ten times


def rehearse(*args: str) -> list[dict[str, Any]]:
    if netns() is None:
        pytest.skip("no network namespace can be made here (`unshare -rn`)")
    out = subprocess.run(
        [sys.executable, "-m", "rehearsal", "--scale", str(SCALE), "--json", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
        env=base_env(),
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]
