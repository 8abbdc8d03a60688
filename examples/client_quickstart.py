"""gpufed's Python client in a few lines: submit a job, wait for it, read its log; then a small sweep.

    GPUFED_URL=https://gpufed.lab.example:8443 GPUFED_TOKEN=... python examples/client_quickstart.py

(or a context in ~/.config/gpufed/config.yaml, as the CLI uses). docs/batch.md describes the calls.
"""

from __future__ import annotations

import sys

from broker.client import Client, ClientError

TRAIN = """
name: quickstart-train
gpus: 1
image: busybox:1.36
command: ["sh", "-c", "echo training; sleep 5"]
durationSeconds: 60
"""


def main() -> int:
    with Client() as gpufed:
        preview = gpufed.submit(TRAIN, dry_run=True)  # validated, priced and explained; nothing created
        explained = preview["explain"]
        print("dry run:", explained["placement"]["cluster"] if explained["placed"] else explained["message"])

        job = gpufed.submit(TRAIN)  # YAML text, a dict, or a pathlib.Path to a file
        print("submitted", job["id"], job["state"])
        done = gpufed.wait(job["id"], timeout=600)
        print("ended", done["state"], "on", done["cluster"])
        for line in gpufed.logs(job["id"]):
            print("log:", line)

        sweep = gpufed.submit(
            {
                "name": "quickstart-sweep",
                "gpus": 1,
                "durationSeconds": 30,
                "array": {"count": 3, "parallelism": 2},  # GPUFED_ARRAY_INDEX 0, 1, 2; two at a time
                "dependsOn": [{"job": job["id"], "when": "succeeded"}],
            }
        )
        for member in sweep["items"]:
            gpufed.wait(member["id"], timeout=600)
        print("sweep", gpufed.group("quickstart-sweep")["counts"])
        return 0 if done["state"] == "SUCCEEDED" else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ClientError as e:
        print(f"gpufed: {e}", file=sys.stderr)
        sys.exit(e.code)
