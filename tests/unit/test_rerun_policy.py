"""The suite's rerun policy (tests/conftest.py), run on a throwaway test file in a pytest of its own:
a failing integration test is run once more and the summary counts it; a `race` test never is, even
when the command line asks for reruns; a race test rerun all the same fails the session. Each case runs
twice: in one process, and as CI runs the suite (`make test`: pytest-xdist, `-n 2 --dist loadfile`, the
reruns happening on a worker and the summary and the verdict on the controller)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


PASSES = """
import pytest

pytestmark = pytest.mark.integration


def test_passes() -> None:
    assert True
"""

XDIST = ("-n", "2", "--dist", "loadfile")  # how `make test` runs the suite
HOW = pytest.mark.parametrize("how", [(), XDIST], ids=["one-process", "xdist"])


def _run(tmp_path: Path, decorators: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_throwaway.py").write_text(FLAKY_ONCE.format(decorators=decorators))
    (tmp_path / "test_beside.py").write_text(PASSES)  # a second file, for the second worker
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # an empty ini: none of the project's settings
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-q", *args, str(tmp_path)],
        cwd=repo, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert ("bringing up nodes" in done.stdout) == ("-n" in args), done.stdout  # xdist ran when asked
    return done


@HOW
def test_a_failing_integration_test_is_run_once_more_and_the_summary_counts_it(
    tmp_path: Path, how: tuple[str, ...]
) -> None:
    done = _run(tmp_path, "", *how)
    assert done.returncode == 0, done.stdout
    assert "2 passed" in done.stdout and "1 rerun" in done.stdout
    assert "reruns: 1:" in done.stdout
    assert "RERUN " in done.stdout and "test_fails_the_first_time (1x)" in done.stdout
    assert "failed first: (call) assert 0 >= 1" in done.stdout  # why it needed a second try


@HOW
def test_a_race_test_is_never_rerun_even_when_the_command_line_asks(
    tmp_path: Path, how: tuple[str, ...]
) -> None:
    done = _run(tmp_path, "@pytest.mark.race", "--reruns", "3", *how)
    assert done.returncode == 1, done.stdout
    assert "reruns: 0" in done.stdout
    assert "1 failed, 1 passed" in done.stdout and "rerun" not in done.stdout.split("reruns: 0")[1]
    assert (tmp_path / "test_throwaway.count").read_text() == "1"  # it ran once, on whichever worker


@HOW
def test_a_race_test_rerun_all_the_same_fails_the_session(tmp_path: Path, how: tuple[str, ...]) -> None:
    done = _run(tmp_path, "@pytest.mark.race\n@pytest.mark.flaky(reruns=1)", *how)
    assert "2 passed" in done.stdout  # it passed on its second try ...
    assert "race tests were rerun" in done.stdout
    assert done.returncode == 1, done.stdout  # ... and the session fails all the same
