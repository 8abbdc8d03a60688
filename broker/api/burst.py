"""The API's burst views: a queued job's predicted on-prem start, and each tenant's spend (docs/burst.md).

    GET /v1/spend    each tenant's cloud spend this period: spent (finished runs), committed (its cloud
                     jobs still running, at their expected run time), budget, left, whether over it;
                     a user sees its own tenant only, admins and viewers every tenant; avoided: the
                     cloud cost burst-back moves are expected to have saved it this period (movedBack:
                     how many moves)

Owns the JSON shapes; api.py routes to them.
"""

from __future__ import annotations

from typing import Any

from broker.api.views import FleetViews
from broker.burst.wait_prediction import Prediction
from broker.tenancy.auth import Principal

__all__ = ["prediction_view", "spend_view"]


def prediction_view(p: Prediction | None) -> dict[str, Any]:
    """predictedStart (epoch seconds, null: never or not modelled), predictedWaitSeconds, predictedWait
    (the explanation, as a person reads it)."""
    if p is None:
        return {"predictedStart": None, "predictedWaitSeconds": None, "predictedWait": None}
    return {
        "predictedStart": p.start_at,
        "predictedWaitSeconds": p.wait_seconds,
        "predictedCluster": p.cluster,
        "predictedWait": p.explain,
    }


def spend_view(views: FleetViews, principal: Principal) -> dict[str, Any]:
    spend = views.spend()
    items = []
    for tenant, s in sorted(spend.items()):
        if not principal.may_read(tenant):
            continue
        items.append(
            {
                "tenant": tenant,
                "periodStart": s.period_start,
                "period": str(s.budget.period) if s.budget else "month",
                "spent": round(s.spent, 4),
                "gpuHours": round(s.gpu_hours, 4),
                "runs": s.runs,
                "committed": round(s.committed, 4),
                "budget": s.budget.amount if s.budget else None,
                "hardBudget": bool(s.budget and s.budget.hard),
                "left": None if s.left is None else round(s.left, 4),
                "overBudget": s.over,
                "avoided": round(s.avoided, 4),
                "movedBack": s.moved_back,
            }
        )
    return {"items": items}
