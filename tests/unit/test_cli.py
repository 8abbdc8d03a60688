"""The CLI's manners without a broker: each bad input is one line on stderr and its exit code; the
endpoint and token come from flags, env or a kubeconfig-like context file; a YAML bomb is refused quickly;
`serve` startup errors name their cause in one line. A tiny real HTTP server stands in where an answer is
needed (401/403, what headers were sent)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from broker import cli
from broker.cli.client import ago
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
DEAD = "http://127.0.0.1:9"  # discard port: nothing listens


def gpufed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str, stdin: str | None = None
) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    capsys.readouterr()
    code = cli.run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFED_CONFIG", os.devnull)  # no config file (a named missing one is an error)
    for var in ("GPUFED_URL", "GPUFED_TOKEN", "GPUFED_CONTEXT"):
        monkeypatch.delenv(var, raising=False)


def _bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("argv", "stdin", "code", "says"),
    [
        (["jobs", "--server", DEAD], None, 3, "cannot reach the broker at http://127.0.0.1:9"),
        (["fleet", "-o", "xml", "--server", DEAD], None, 2, "'xml' is not one of"),
        (["get", "--server", DEAD], None, 2, "Missing argument"),
        (["submit", "--server", DEAD], None, 2, "give a job NAME with flags, or --file"),
        (["submit", "-f", "/no/such.yaml", "--server", DEAD], None, 2, "No such file or directory"),
        (["submit", "-f", "-", "--server", DEAD], "name: [1, 2", 2, "not valid YAML (line 1"),
        (["submit", "-f", "-", "--server", DEAD], _bomb(), 2, "expands to more than"),
        (["submit", "-f", "-", "--server", DEAD], "- a list", 2, "expected a job (a mapping)"),
        (
            ["submit", "x", "--env", "NOEQUALS", "--server", DEAD],
            None,
            2,
            "--env[0]: 'NOEQUALS' is not NAME=VALUE",
        ),
        (["submit", "x", "--command", "'unclosed", "--server", DEAD], None, 2, "--command"),
        (["jobs", "--server", "ftp://x"], None, 2, "is not an http:// or https:// URL"),
        (["jobs", "--context", "lab"], None, 2, "--context lab: no config file"),
        (["probe", "--nvidia-smi-xml", "/no/such.xml"], None, 2, "no such file"),
        (["bogus-command"], None, 2, "No such command"),
        (["jobs", "--state", "bogus", "--server", DEAD], None, 2, "--state: 'bogus' is not a job state"),
    ],
)
def test_each_bad_input_is_one_line_and_an_exit_code(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    stdin: str | None,
    code: int,
    says: str,
) -> None:
    got, out, err = gpufed(capsys, monkeypatch, *argv, stdin=stdin)
    assert got == code, (out, err)
    assert len(err.strip().splitlines()) == 1, err  # one line: no traceback, not doubled
    assert err.startswith("gpufed: error: ")
    assert says in err
    assert "[red]" not in err


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []
    status = 401

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers))
        body = json.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "token [expired]",
                "code": 401,
            }
        ).encode()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def auth_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_exit_4_and_the_token_is_sent_as_bearer(
    auth_server: str, status: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _Recorder.status = status
    monkeypatch.setenv("GPUFED_TOKEN", "s3cret")
    code, _, err = gpufed(capsys, monkeypatch, "jobs", "--server", auth_server)
    assert code == 4
    assert err.strip() == f"gpufed: error: {status} token [expired]"  # brackets survive: no markup
    assert _Recorder.seen[-1]["Authorization"] == "Bearer s3cret"


def test_endpoint_and_token_come_from_the_current_context(
    tmp_path: Path, auth_server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "current-context": "lab",
                "contexts": [
                    {"name": "lab", "server": auth_server, "token": "from-context"},
                    {"name": "dead", "server": DEAD},
                ],
            }
        )
    )
    monkeypatch.setenv("GPUFED_CONFIG", str(cfg))
    _Recorder.status = 401
    code, _, _ = gpufed(capsys, monkeypatch, "jobs")
    assert code == 4 and _Recorder.seen[-1]["Authorization"] == "Bearer from-context"
    code, _, err = gpufed(capsys, monkeypatch, "jobs", "--context", "dead")
    assert code == 3 and DEAD in err
    code, _, _ = gpufed(capsys, monkeypatch, "jobs", "--token", "from-flag")  # a flag beats the context
    assert _Recorder.seen[-1]["Authorization"] == "Bearer from-flag"
    code, _, err = gpufed(capsys, monkeypatch, "jobs", "--context", "nope")
    assert code == 2 and "no context 'nope' (has: lab, dead)" in err


def test_human_times() -> None:
    assert ago(1000.0, now=1012.0) == "12s ago"
    assert ago(1000.0, now=1000.0 + 185) == "3m ago"
    assert ago(1000.0, now=1000.0 + 5 * 3600 + 10) == "5h ago"
    assert ago(1000.0, now=1000.0 + 2 * 86400) == "2d ago"
    assert ago(None) == "-"


def _config(tmp_path: Path, redis_url: str) -> Path:
    kubeconfig = tmp_path / "c.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({"contexts": [{"name": "c"}], "current-context": "c"}))
    cfg = tmp_path / "clusters.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "a", "kubeconfig": str(kubeconfig), "tier": "on-prem"}],
                "settings": {"redisUrl": redis_url},
            }
        )
    )
    return cfg


def test_serve_startup_errors_are_one_line_naming_the_cause(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _config(tmp_path, redis_url)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:9/0")  # REDIS_URL overrides the file
    code, _, err = gpufed(capsys, monkeypatch, "serve", "-c", str(cfg), "--port", str(free_port()))
    assert code == 1
    assert (
        err.startswith("gpufed: error: cannot start: redisUrl '127.0.0.1:9/0'")
        or "redis://127.0.0.1:9/0" in err
    )
    assert len(err.strip().splitlines()) == 1, err

    monkeypatch.setenv("REDIS_URL", "not-a-url")
    code, _, err = gpufed(capsys, monkeypatch, "serve", "-c", str(cfg))
    assert code == 1 and "redisUrl" in err and len(err.strip().splitlines()) == 1, err

    monkeypatch.delenv("REDIS_URL")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = gpufed(capsys, monkeypatch, "serve", "-c", str(cfg), "--port", str(port))
    assert code == 1 and f"cannot listen on 127.0.0.1:{port}" in err and len(err.strip().splitlines()) == 1

    code, _, err = gpufed(capsys, monkeypatch, "serve", "-c", str(cfg), "--tls-cert", str(cfg))
    assert code == 1 and "--tls-cert and --tls-key go together" in err

    code, _, err = gpufed(capsys, monkeypatch, "serve", "-c", str(tmp_path / "nope.yaml"))
    assert code == 1 and "cannot read" in err and len(err.strip().splitlines()) == 1  # README: exit 1

    monkeypatch.chdir(REPO)  # a bare `gpufed serve` in a fresh clone points at the example
    code, _, err = gpufed(capsys, monkeypatch, "serve")
    assert code == 1 and "clusters.yaml: cannot read" in err and "--config clusters.example.yaml" in err


def _completion(variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The installed entry point, asked as bash asks it: in a process of its own, through the variables
    click's completion reads (never shell detection, which sees make's /bin/sh under CI)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("_GPUFED")}
    return subprocess.run(
        [str(Path(sys.executable).with_name("gpufed"))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=base | variables,
    )


def test_shell_completion_is_offered() -> None:
    script = _completion({"_GPUFED_COMPLETE": "source_bash"})
    assert script.returncode == 0, script.stderr
    assert "_gpufed_completion" in script.stdout

    words = _completion(
        {
            "_GPUFED_COMPLETE": "complete_bash",
            "_TYPER_COMPLETE_ARGS": "gpufed jo",
            "COMP_WORDS": "gpufed jo",
            "COMP_CWORD": "1",
        }
    )
    assert words.returncode == 0, words.stderr
    assert "jobs" in words.stdout.split()


def test_a_token_before_the_command_is_sent_too(
    auth_server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _Recorder.status = 403
    code, _, _ = gpufed(capsys, monkeypatch, "--token", "global-t", "jobs", "--server", auth_server)
    assert code == 4 and _Recorder.seen[-1]["Authorization"] == "Bearer global-t"


def test_version_and_a_named_config_file_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = gpufed(capsys, monkeypatch, "--version")
    assert code == 0 and out.startswith("gpufed ") and out.split()[1][0].isdigit()
    monkeypatch.setenv("GPUFED_CONFIG", str(tmp_path / "typo.yaml"))
    code, _, err = gpufed(capsys, monkeypatch, "jobs")  # not silently ignored (then a 401 puzzle)
    assert code == 2 and f"GPUFED_CONFIG={tmp_path / 'typo.yaml'}: no such file" in err


def test_tokens_files_are_never_committed() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "tokens.yaml", "deploy/tokens.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ignored.stdout.split() == ["tokens.yaml", "deploy/tokens.yaml"]
