"""`gpufed show-gpus`: which GPU products the fleet has, where, how many are free and what an hour costs
(SkyPilot's `sky show-gpus`, over the broker's live fleet view)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from broker.cli.common import ContextOpt, OutputOpt, ServerOpt, TokenOpt, app, fetch
from broker.cli.output import Output, columns, emit


def gpu_rows(fleet: dict[str, Any], product: str | None = None) -> list[dict[str, Any]]:
    """One row per product and cluster (whole GPUs), then per MIG profile; sorted by product."""
    rows: list[dict[str, Any]] = []
    for c in fleet["clusters"]:
        for p in c["products"]:
            rows.append(
                {
                    "product": p["product"],
                    "memoryGiB": round(p["memoryMiB"] / 1024),
                    "cluster": c["cluster"],
                    "tier": c["tier"],
                    "health": c["health"],
                    "free": p["free"],
                    "allocatable": p["allocatable"],
                    "maxFreeOnOneNode": p["maxFreeOnOneNode"],
                    "pricePerGpuHour": p.get("pricePerGpuHour"),
                }
            )
        for m in c.get("mig", []):
            rows.append(
                {
                    "product": f"{m['product']} MIG {m['profile']}",
                    "memoryGiB": None,
                    "cluster": c["cluster"],
                    "tier": c["tier"],
                    "health": c["health"],
                    "free": m["free"],
                    "allocatable": m["allocatable"],
                    "maxFreeOnOneNode": m["largestFreeOnNode"],
                    "pricePerGpuHour": None,
                }
            )
    if product:
        wanted = product.upper()
        rows = [r for r in rows if r["product"].upper().startswith(wanted)]
    return sorted(rows, key=lambda r: (r["product"], r["cluster"]))


@app.command("show-gpus")
def show_gpus(
    product: Annotated[str | None, typer.Argument(help="only products whose name starts with this")] = None,
    output: OutputOpt = Output.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """GPU products in the fleet: where, how many free (and most on one node), price per GPU-hour."""
    rows = gpu_rows(fetch("GET", "/v1/fleet", server, token, context), product)

    def table(wide: bool) -> str:
        headers = ["PRODUCT", "MEMORY", "CLUSTER", "TIER", "FREE/ALLOC", "MAX/NODE", "$/GPU-H"]
        if wide:
            headers.append("HEALTH")
        out = []
        for r in rows:
            price = r["pricePerGpuHour"]
            row = [
                r["product"],
                "-" if r["memoryGiB"] is None else f"{r['memoryGiB']} GiB",
                r["cluster"],
                r["tier"],
                f"{r['free']}/{r['allocatable']}",
                str(r["maxFreeOnOneNode"]),
                "-" if price is None else f"{price:.2f}",
            ]
            out.append([*row, r["health"]] if wide else row)
        return columns(headers, out) if out else "No GPUs" + (f" matching {product!r}." if product else ".")

    emit({"items": rows}, output, table)
