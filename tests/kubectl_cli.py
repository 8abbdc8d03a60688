"""The real kubectl (tools/bin/kubectl, put there by `make setup`) run against kubesim, for tests.

    KUBECTL                    the binary's path
    run_kubectl(*args, kubeconfig=, cache=, stdin=None, ok=(0,), timeout=60)
                               one run with its own HOME and --cache-dir (no user config, no shared
                               discovery cache); stdout and stderr together, asserting the exit code is in ok

A module fixture binds the cluster and cache once: `functools.partial(run_kubectl, kubeconfig=...,
cache=...)`; a call may still pass another kubeconfig (another user's credentials).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

KUBECTL = Path(__file__).resolve().parents[1] / "tools" / "bin" / "kubectl"


def run_kubectl(
    *args: str,
    kubeconfig: Path,
    cache: Path,
    stdin: str | None = None,
    ok: tuple[int, ...] = (0,),
    timeout: float = 60,
) -> str:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(cache)}
    proc = subprocess.run(
        [str(KUBECTL), "--cache-dir", str(cache), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in ok, f"kubectl {' '.join(args)} exited {proc.returncode}:\n{out}"
    return out
