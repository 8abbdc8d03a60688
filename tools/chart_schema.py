"""Write the chart's schema for `settings` and `clusters[]` from the broker's own config models.

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


def expected(current: dict[str, Any]) -> dict[str, Any]:
    from broker.config.settings import ClusterConfig, Settings

    new = json.loads(json.dumps(current))
    new["properties"]["settings"] = model_schema(Settings, "redisUrl")
    new["properties"]["clusters"]["items"] = model_schema(ClusterConfig, "kubeconfig")
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
