"""The suite's rerun policy (tests/conftest.py), run on a throwaway test file in a pytest of its own:
a failing integration test is run once more and the summary counts it; a `race` test never is, even
when the command line asks for reruns; a race test rerun all the same fails the session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FLAKY_ONCE = """
import pathlib
import pytest

pytestmark = pytest.mark.integration
COUNT = pathlib.Path(__file__).with_suffix(".count")


def _attempt() -> int:
    n = int(COUNT.read_text()) if COUNT.exists() else 0
    COUNT.write_text(str(n + 1))
    return n


{decorators}
def test_fails_the_first_time() -> None:
    assert _attempt() >= 1
"""


def _run(tmp_path: Path, decorators: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_throwaway.py").write_text(FLAKY_ONCE.format(decorators=decorators))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # an empty ini: none of the project's settings
    repo = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-q", *args, str(tmp_path)],
        cwd=repo, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_failing_integration_test_is_run_once_more_and_the_summary_counts_it(tmp_path: Path) -> None:
    done = _run(tmp_path, "")
    assert done.returncode == 0, done.stdout
    assert "reruns: 1:" in done.stdout
    assert "RERUN " in done.stdout and "test_fails_the_first_time (1x)" in done.stdout
    assert "failed first: (call) assert 0 >= 1" in done.stdout  # why it needed a second try


def test_a_race_test_is_never_rerun_even_when_the_command_line_asks(tmp_path: Path) -> None:
    done = _run(tmp_path, "@pytest.mark.race", "--reruns", "3")
    assert done.returncode == 1, done.stdout
    assert "reruns: 0" in done.stdout
    assert "1 failed" in done.stdout


def test_a_race_test_rerun_all_the_same_fails_the_session(tmp_path: Path) -> None:
    done = _run(tmp_path, "@pytest.mark.race\n@pytest.mark.flaky(reruns=1)")
    assert "1 passed" in done.stdout  # it passed on its second try ...
    assert "race tests were rerun" in done.stdout
    assert done.returncode == 1, done.stdout  # ... and the session fails all the same
