"""The suite's own rule on skips (tests/conftest.py): every skip prints its
reason, and under CI=true a run as root with any skip fails, with the list of them
(not root, as a pull request's tiers run, the root cases skip and say why)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.process import ROOT, base_env

CASES = """
import pytest

def test_runs():
    pass

def test_cannot_run_here():
    pytest.skip("no frobnicator on this machine")
"""


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """pytest on CASES with this project's settings and conftest, CI as given."""
    (tmp_path / "test_cases.py").write_text(CASES)
    env = base_env()
    env.pop("CI", None)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p", "tests.conftest",
         "-p", "no:cacheprovider", "-q", str(tmp_path / "test_cases.py")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_skip_prints_its_reason_and_passes_outside_ci(tmp_path: Path) -> None:
    done = _pytest(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no frobnicator on this machine" in done.stdout
    assert "1 passed, 1 skipped" in done.stdout
    assert "unexpected skips" not in done.stdout


def test_a_skip_fails_the_run_under_ci_as_root(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "true")
    if os.geteuid() != 0:  # the pull request's non-root tier: the skip is said, and passes
        assert done.returncode == 0, done.stdout + done.stderr
        assert "no frobnicator on this machine" in done.stdout
        return
    assert done.returncode == 1, done.stdout + done.stderr
    assert "unexpected skips (CI=true allows none)" in done.stdout
    assert "::test_cannot_run_here: Skipped: no frobnicator" in done.stdout
    assert "1 passed, 1 skipped" in done.stdout
