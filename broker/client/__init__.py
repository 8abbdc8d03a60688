"""gpufed's Python client: submit, follow and manage jobs on a gpufed broker (docs/batch.md, "Python client").

    from broker.client import Client

    with Client() as gpufed:                      # GPUFED_URL / GPUFED_TOKEN, or the config file's context
        job = gpufed.submit({"name": "train", "gpus": 1, "image": "ghcr.io/me/train:1"})
        done = gpufed.wait(job["id"], timeout=3600)
        print(done["state"], "".join(gpufed.logs(job["id"])))

Sync, on httpx; the same auth and context rules as the `gpufed` CLI, which is built on it.
"""

from broker.client.config import Target, config_path, resolve_target
from broker.client.errors import EXIT_AUTH, EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE, ClientError
from broker.client.http import DEFAULT_CHUNK_SIZE, TERMINAL, Client

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "EXIT_AUTH",
    "EXIT_FAILED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "TERMINAL",
    "Client",
    "ClientError",
    "Target",
    "config_path",
    "resolve_target",
]
