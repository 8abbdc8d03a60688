"""A context's credential plugin (broker.cli.exec_credential), as kubectl runs one: the token it prints is sent as
the bearer token; a plugin that fails, hangs up without a token or is missing is one line and exit 4,
a bad `exec` block is exit 2 naming the field. The plugins are small Python scripts the test writes;
the broker is a tiny real HTTP server that records the Authorization header it got."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from broker import cli
from tests.conftest import free_port

SEEN: list[str] = []


class _Broker(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        SEEN.append(self.headers.get("Authorization", ""))
        body = json.dumps({"items": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def broker() -> Iterator[str]:
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _Broker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    server.server_close()


def _plugin(tmp_path: Path, body: str) -> str:
    path = tmp_path / "plugin.py"
    path.write_text("import json, os, sys\n" + body)
    return str(path)


def _context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str, exec_block: Any) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {"current-context": "sso", "contexts": [{"name": "sso", "server": server, "exec": exec_block}]}
        )
    )
    monkeypatch.setenv("GPUFED_CONFIG", str(cfg))
    for var in ("GPUFED_URL", "GPUFED_TOKEN", "GPUFED_CONTEXT"):
        monkeypatch.delenv(var, raising=False)


def test_the_plugins_token_is_sent_and_it_learns_the_api_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = _plugin(
        tmp_path,
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',"
        " 'status': {'token': 'sso-' + info['apiVersion'].rsplit('/', 1)[1] + '-' + os.environ['EXTRA']}}))\n",
    )
    exec_block = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": [plugin],
        "env": [{"name": "EXTRA", "value": "x1"}],
    }
    _context(tmp_path, monkeypatch, broker, exec_block)
    assert cli.run(["jobs"]) == 0
    assert SEEN[-1] == "Bearer sso-v1beta1-x1"
    assert cli.run(["jobs", "--token", "from-flag"]) == 0  # a token given wins: the plugin is not run
    assert SEEN[-1] == "Bearer from-flag"
    assert "sso-v1beta1" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("exec_block", "code", "says"),
    [
        (
            {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]},
            4,
            "exited 3 (its message is above)",
        ),
        ({"command": sys.executable, "args": ["-c", "print('{}')"]}, 4, "printed no status.token"),
        ({"command": sys.executable, "args": ["-c", "print('hello')"]}, 4, "did not print an ExecCredential"),
        ({"command": "/no/such/plugin"}, 4, "exec.command: /no/such/plugin: not found"),
        ({"args": ["x"]}, 2, "context 'sso'.exec.command: required"),
        ({"command": "x", "apiVersion": "v2"}, 2, "exec.apiVersion: one of client.authentication.k8s.io/v1"),
    ],
)
def test_a_failing_or_badly_declared_plugin_is_one_line_and_an_exit_code(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    broker: str,
    capsys: pytest.CaptureFixture[str],
    exec_block: dict[str, Any],
    code: int,
    says: str,
) -> None:
    _context(tmp_path, monkeypatch, broker, exec_block)
    capsys.readouterr()
    assert cli.run(["jobs"]) == code
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
