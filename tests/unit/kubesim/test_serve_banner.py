"""What `kubesim serve` prints once up is copied from logs: paths and commands whole at 80 columns."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from kubesim.cli import print_started


def test_paths_and_commands_are_never_cut_in_a_narrow_log() -> None:
    buf = io.StringIO()
    kubeconfig = ".demo/kubeconfigs/cloud-burst.kubeconfig"
    rows = [("cloud-burst", "https://127.0.0.1:35669", kubeconfig)]
    admin = "http://127.0.0.1:38859"
    print_started(Console(file=buf, width=80), "kubesim", rows, admin, Path(".demo/kubeconfigs"))
    lines = buf.getvalue().splitlines()
    assert not any("…" in line for line in lines)  # nothing cut short
    assert f"admin: {admin}   (e.g. kubesim fault <cluster> --down --out .demo/kubeconfigs)" in lines
    assert f"try:   KUBECONFIG={kubeconfig} kubectl get nodes" in lines
