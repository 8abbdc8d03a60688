"""Image pulls that fail, as the kubelet and containerd report them.

Owns which images can't be pulled in the simulation (any under `registry.invalid/`, a name reserved by
RFC 2606 that never resolves), the container runtime's error text for them (containerd's
`failed to pull and unpack image ...` over a failed registry lookup, through the CRI as a gRPC error),
the kubelet's image back-off (10 s doubling per failed pull, at most 300 s) and the container statuses a
pod shows meanwhile: waiting `ErrImagePull` with the runtime's message right after a failed pull, then
waiting `ImagePullBackOff` with `Back-off pulling image "<image>"` until the next try. The kubelet's
events for each (reason, type, message) are listed here too; the Kubelet records them. Pure.
"""

from __future__ import annotations

from kubesim.store import Obj

INVALID_REGISTRY = "registry.invalid/"
BACKOFF_START_S, BACKOFF_MAX_S = 10.0, 300.0
NEXT_SYNC_S = 1.0  # the pod worker's next sync after a failed pull: it finds the image in back-off


def fails(image: str) -> bool:
    """The image can't be pulled from here (its registry never resolves)."""
    return image.startswith(INVALID_REGISTRY)


def failing_images(pod: Obj) -> list[str]:
    """The images of the pod's containers that can't be pulled (init containers are not simulated)."""
    containers = (pod.get("spec") or {}).get("containers") or ()
    return [str(c.get("image") or "") for c in containers if fails(str(c.get("image") or ""))]


def _reference(image: str) -> tuple[str, str, str]:
    """(host, repository, tag or digest) of an image reference (tag `latest` when none is given)."""
    host, _, rest = image.partition("/")
    if "@" in rest:
        repo, _, ref = rest.partition("@")
    else:
        repo, sep, ref = rest.rpartition(":")
        if not sep or "/" in ref:
            repo, ref = rest, "latest"
    return host, repo, ref


def runtime_error(image: str) -> str:
    """containerd's pull error for an image whose registry host does not resolve, through the CRI."""
    host, repo, ref = _reference(image)
    return (
        f'rpc error: code = Unknown desc = failed to pull and unpack image "{image}": '
        f'failed to resolve reference "{image}": failed to do request: '
        f'Head "https://{host}/v2/{repo}/manifests/{ref}": dial tcp: lookup {host}: no such host'
    )


def backoff_s(failed_pulls: int) -> float:
    """How long the kubelet waits before pulling again after this many failed pulls."""
    return float(min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** max(0, failed_pulls - 1)))


def pull_failed_events(image: str) -> list[tuple[str, str, str]]:
    """(reason, type, message) the kubelet records for one failed pull."""
    return [
        ("Pulling", "Normal", f'Pulling image "{image}"'),
        ("Failed", "Warning", f'Failed to pull image "{image}": {runtime_error(image)}'),
        ("Failed", "Warning", "Error: ErrImagePull"),
    ]


def backoff_events(image: str) -> list[tuple[str, str, str]]:
    """(reason, type, message) the kubelet records when a sync finds the image in back-off."""
    return [
        ("BackOff", "Normal", f'Back-off pulling image "{image}"'),
        ("Failed", "Warning", "Error: ImagePullBackOff"),
    ]


def waiting_statuses(pod: Obj, backing_off: bool) -> list[Obj]:
    """containerStatuses while the pod's images can't be pulled: the failing container waits with
    ErrImagePull (or ImagePullBackOff), the others wait in ContainerCreating."""
    out: list[Obj] = []
    for c in (pod.get("spec") or {}).get("containers") or ():
        image = str(c.get("image") or "")
        if fails(image):
            waiting = (
                {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
                if backing_off
                else {"reason": "ErrImagePull", "message": runtime_error(image)}
            )
        else:
            waiting = {"reason": "ContainerCreating"}
        out.append(
            {
                "name": c.get("name", ""),
                "image": image,
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": waiting},
                "lastState": {},
            }
        )
    return out
