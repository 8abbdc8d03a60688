"""The image recipe: tools/lint_containerfile.py passes on the Containerfile (the runtime user is the
chart's runAsUser) and catches what it promises to catch. No image builder runs here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LINT = REPO / "tools" / "lint_containerfile.py"
DIGEST = "@sha256:" + "ab" * 32


def _lint(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LINT), str(path), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_containerfile_is_clean_and_runs_as_the_charts_user() -> None:
    uid = yaml.safe_load((REPO / "charts" / "gpufed" / "values.yaml").read_text())["podSecurityContext"][
        "runAsUser"
    ]
    out = _lint(REPO / "Containerfile", "--uid", str(uid))
    assert out.returncode == 0, out.stdout
    text = (REPO / "Containerfile").read_text()
    assert "COPY --from=build" in text and text.count("FROM ${PYTHON_BASE}") == 2


GOOD = f"""FROM python:3.11-slim{DIGEST} AS build
RUN pip install --no-cache-dir .
FROM python:3.11-slim{DIGEST} AS runtime
COPY --from=build /opt/x /opt/x
USER 10001
ENTRYPOINT ["gpufed"]
"""


@pytest.mark.parametrize(
    ("change", "finding"),
    [
        ((f"python:3.11-slim{DIGEST} AS runtime", "python:latest AS runtime"), "pinned-base"),
        (("USER 10001", "USER root"), "non-root: USER root is not numeric"),
        (("USER 10001", "USER 0"), "non-root: USER is root"),
        (("USER 10001\n", ""), "non-root: the final stage sets no USER"),
        (('ENTRYPOINT ["gpufed"]', "ENTRYPOINT gpufed serve"), "exec-form"),
        (("pip install --no-cache-dir .", "pip install ."), "pip-no-cache"),
        (("pip install --no-cache-dir .", "apt-get install -y curl"), "apt-hygiene"),
        (("COPY --from=build /opt/x /opt/x", "ADD https://example.com/x.tgz /opt/"), "no-remote-add"),
        (("USER 10001", "ENV API_TOKEN=abc\nUSER 10001"), "no-secrets"),
        (("COPY --from=build /opt/x /opt/x", "COPY . /opt/x"), "multi-stage"),
    ],
)
def test_each_rule_catches_its_mistake(tmp_path: Path, change: tuple[str, str], finding: str) -> None:
    good = tmp_path / "Good"
    good.write_text(GOOD)
    assert _lint(good).returncode == 0
    bad = tmp_path / "Bad"
    bad.write_text(GOOD.replace(*change))
    out = _lint(bad)
    assert out.returncode == 1
    assert finding in out.stdout
