"""Write the chart's schema for `settings`, `clusters[]`, `auth.oidc`, `hub` and `clusterProfiles` from
the broker's own config models.

The chart passes `settings` and each cluster through to the clusters.yaml the broker reads, so the
values the chart accepts there are exactly what broker.config accepts: this script derives that part of
charts/gpufed/values.schema.json from the pydantic models (refs inlined, titles and defaults dropped,
unknown keys still refused), leaving out what the chart fills in itself (settings.redisUrl, a cluster's
kubeconfig path). tests/unit/test_helm_chart.py fails when the committed schema has drifted.

    python tools/chart_schema.py           rewrite values.schema.json
    python tools/chart_schema.py --check   exit 1 when it is not what the models say
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "charts" / "gpufed" / "values.schema.json"
sys.path.insert(0, str(REPO))

DROP = {"title", "default", "description"}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(defs[node["$ref"].rsplit("/", 1)[1]], defs)
        return {k: _inline(v, defs) for k, v in node.items() if k not in DROP and k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def model_schema(model: Any, leave_out: str) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema: dict[str, Any] = _inline(raw, raw.get("$defs", {}))
    schema["properties"].pop(leave_out, None)
    schema["required"] = [r for r in schema.get("required", []) if r != leave_out]
    if not schema["required"]:
        del schema["required"]
    return schema


def optional_block(schema: dict[str, Any]) -> dict[str, Any]:
    """A block the chart may leave empty (`{}`, its default) but, once anything is set in it, must be
    complete: the model's required keys become required as soon as the block has a key (JSON Schema's
    if/then; helm names the missing key: "at '/auth/oidc': missing property 'issuerUrl'")."""
    required = schema.pop("required", [])
    if required:
        schema["if"] = {"minProperties": 1}
        schema["then"] = {"required": required}
    return schema


# Keys the chart reads itself and does not pass to the broker, beside a model's own.
ENABLED = {"type": "boolean"}
IN_CLUSTER = {"type": "boolean"}


def with_chart_keys(schema: dict[str, Any], **keys: dict[str, Any]) -> dict[str, Any]:
    schema["properties"] = {**keys, **schema["properties"]}
    return schema


def expected(current: dict[str, Any]) -> dict[str, Any]:
    from broker.config.hub import HubConfig
    from broker.config.settings import ClusterConfig, ClusterProfilesConfig, Settings
    from broker.tenancy.auth_config import OidcConfig

    new = json.loads(json.dumps(current))
    props = new["properties"]
    props["settings"] = model_schema(Settings, "redisUrl")
    props["clusters"]["items"] = model_schema(ClusterConfig, "kubeconfig")
    oidc = optional_block(model_schema(OidcConfig, ""))
    oidc["properties"]["issuerUrl"]["pattern"] = "^https://"  # OidcConfig's validator: https only
    props["auth"]["properties"]["oidc"] = oidc
    # hub: and clusterProfiles: as clusters.yaml takes them; the chart fills in the files (the hub's
    # kubeconfig, the provider file) and reads `enabled` and `inCluster` itself.
    props["hub"] = with_chart_keys(model_schema(HubConfig, "kubeconfig"), enabled=ENABLED, inCluster=IN_CLUSTER)
    profiles = model_schema(ClusterProfilesConfig, "hubKubeconfig")
    profiles["properties"].pop("providerFile")
    profiles.pop("required", None)
    props["clusterProfiles"] = with_chart_keys(
        profiles,
        enabled=ENABLED,
        inCluster=IN_CLUSTER,
        providers={"type": "array", "items": {"type": "object", "required": ["name"]}},
    )
    return new


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str]) -> int:
    current = json.loads(SCHEMA.read_text())
    text = render(expected(current))
    if "--check" in argv:
        if SCHEMA.read_text() != text:
            sys.stderr.write(f"{SCHEMA}: out of date with broker.config; run python tools/chart_schema.py\n")
            return 1
        return 0
    SCHEMA.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
