"""The admin endpoint: plain HTTP on 127.0.0.1 for fault and clock control of a running simulation.

GET    /clusters                     every cluster: server URL, kubeconfig, faults, open watches
GET    /clusters/<name>              one cluster
GET    /clusters/<name>/faults       its fault state
POST   /clusters/<name>/faults       {"down": true} {"hang": true} {"latency": 0.5}
                                     {"error_rate": 0.3, "error_codes": [500, 503, 429], "retry_after": 2}
                                     {"expired_token": true} {"forbidden": true} {"cut_watches": true}
                                     {"reset_connections": true} (TCP reset of every open connection)
                                     {"clear": true} (any mix; false/0 clears one fault)
DELETE /clusters/<name>/faults       clear every fault
GET    /clusters/<name>/requests     {"requests": [{"verb", "resource", "count"}...], "total": n}: API
                                     requests served since start, per verb and resource
GET    /clusters/<name>/users        users bound to tokens: {"users": {name: kubeconfig path}}
POST   /clusters/<name>/users        {"name": "broker", "groups": ["gpufed"], "token": optional}: bind a token
                                     to a user (RBAC applies); answers the token and a kubeconfig path
POST   /clusters/<name>/compact      {"resource": "nodes", "keep": 0}: drop watch history (forces 410)
GET    /clusters/<name>/spot         the cluster's spot nodes
POST   /clusters/<name>/spot         {"node": "<name>"} or {"pool": "<spot pool>"}: a spot interruption now
                                     (notice event + cordon; the node goes after the pool's notice seconds)
GET    /clusters/<name>/gpus         GPUs with a fault history: {"gpus": [{node, gpu, uuid, lastXid, xids,
                                     unhealthy, since, reason}]}
POST   /clusters/<name>/gpus         {"xid": [{"node": N, "gpu": 3, "code": 79}, ...]} inject XIDs now;
                                     {"clear": [{"node": N, "gpu": 3}]} reset those GPUs (healthy again)
GET    /clock                        {"now": <sim epoch>, "speed": x}
POST   /clock                        {"speed": x} and/or {"advance": seconds}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from kubesim.controllers.spot import SpotError
from kubesim.faults import FaultError
from kubesim.gpuhealth import GpuFaultError
from kubesim.http import Connection, Request, Response
from kubesim.resources import BY_KEY

if TYPE_CHECKING:
    from kubesim.sim import Simulation


def _json(obj: Any, status: int = 200) -> Response:
    return Response(status, orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


class AdminApi:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def _cluster(self, name: str) -> dict[str, Any]:
        sim = self.sim
        api = sim.api(name)
        return {
            "name": name,
            "server": sim.server_url(name),
            "kubeconfig": str(sim.kubeconfig_path(name)),
            "faults": api.faults.as_dict(),
            "watches": api.watch_count,
            "resourceVersion": api.store.resource_version,
        }

    def _clock(self) -> dict[str, Any]:
        return {"now": self.sim.clock.now(), "speed": self.sim.clock.speed}

    async def handle(self, req: Request, conn: Connection) -> Response | None:
        segs = [s for s in req.path.split("/") if s]
        body: Any = {}
        if req.body:
            try:
                body = orjson.loads(req.body)
            except orjson.JSONDecodeError as e:
                return _error(400, f"the body is not JSON: {e}")
            if not isinstance(body, dict):
                return _error(400, "the body must be a JSON object")
        try:
            return await self._route(req.method, segs, body)
        except FaultError as e:
            return _error(400, str(e))
        except KeyError as e:
            return _error(404, str(e.args[0]) if e.args else "not found")

    async def _route(self, method: str, segs: list[str], body: dict[str, Any]) -> Response:
        sim = self.sim
        if not segs or segs == ["clusters"]:
            if method != "GET":
                return _error(405, "use GET")
            return _json(
                {
                    "admin": sim.admin_url,
                    "clock": self._clock(),
                    "clusters": [self._cluster(n) for n in sim.cluster_names()],
                }
            )
        if segs == ["clock"]:
            if method == "POST":
                speed, advance = body.get("speed"), body.get("advance")
                if speed is None and advance is None:
                    return _error(400, 'send {"speed": x} and/or {"advance": seconds}')
                for label, value in (("speed", speed), ("advance", advance)):
                    if value is not None and (
                        isinstance(value, bool) or not isinstance(value, int | float) or value < 0
                    ):
                        return _error(400, f"{label} must be a number >= 0")
                if speed is not None:
                    sim.clock.set_speed(float(speed))
                if advance:
                    sim.clock.advance(float(advance))
            elif method != "GET":
                return _error(405, "use GET or POST")
            return _json(self._clock())
        if segs[0] == "clusters" and len(segs) >= 2:
            name = segs[1]
            sim.api(name)  # KeyError -> 404
            if len(segs) == 2 and method == "GET":
                return _json(self._cluster(name))
            if len(segs) == 3 and segs[2] == "faults":
                if method == "GET":
                    return _json(await sim.set_faults(name, {}))
                if method == "POST":
                    return _json(await sim.set_faults(name, body))
                if method == "DELETE":
                    return _json(await sim.set_faults(name, {"clear": True}))
                return _error(405, "use GET, POST or DELETE")
            if len(segs) == 3 and segs[2] == "requests" and method == "GET":
                counts = sim.api(name).request_counts()
                rows = [{"verb": v, "resource": r, "count": n} for (v, r), n in sorted(counts.items())]
                return _json({"requests": rows, "total": sum(counts.values())})
            if len(segs) == 3 and segs[2] == "users":
                if method == "GET":
                    return _json({"users": {u: str(p) for u, p in sim.users(name).items()}})
                if method != "POST":
                    return _error(405, "use GET or POST")
                user, groups, token = body.get("name"), body.get("groups", []), body.get("token")
                if not isinstance(user, str) or not user:
                    return _error(400, "name (the user) must be a non-empty string")
                if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                    return _error(400, "groups must be a list of strings")
                if token is not None and (not isinstance(token, str) or len(token) < 16):
                    return _error(400, "token must be a string of at least 16 characters")
                try:
                    token = sim.register_user(name, user, tuple(groups), token)
                except ValueError as e:
                    return _error(400, str(e))
                return _json(
                    {
                        "name": user,
                        "groups": groups,
                        "token": token,
                        "kubeconfig": str(sim.user_kubeconfig_path(name, user)),
                    }
                )
            if len(segs) == 3 and segs[2] == "compact" and method == "POST":
                key = str(body.get("resource", "nodes"))
                if key not in BY_KEY:
                    return _error(400, f"unknown resource {key!r}; known: {', '.join(BY_KEY)}")
                keep = body.get("keep", 0)
                if not isinstance(keep, int) or keep < 0:
                    return _error(400, "keep must be an integer >= 0")
                store = sim.store(name)
                store.compact(key, keep)
                return _json({"resource": key, "kept": keep, "resourceVersion": store.resource_version})
            if len(segs) == 3 and segs[2] == "spot":
                return self._spot(name, method, body)
            if len(segs) == 3 and segs[2] == "gpus":
                return self._gpus(name, method, body)
        return _error(404, f"no admin route {method} /{'/'.join(segs)}")

    def _spot(self, name: str, method: str, body: dict[str, Any]) -> Response:
        controllers = self.sim.controllers(name)
        if controllers is None:
            return _error(409, "the simulation runs without controllers: nothing interrupts spot nodes")
        spot = controllers.spot
        if method == "GET":
            return _json({"nodes": spot.spot_nodes()})
        if method != "POST":
            return _error(405, "use GET or POST")
        target = body.get("node") or body.get("pool")
        if not isinstance(target, str) or not target:
            return _error(400, 'send {"node": "<spot node>"} or {"pool": "<spot pool>"}')
        try:
            return _json(spot.interrupt(target))
        except SpotError as e:
            return _error(400, str(e))

    def _gpus(self, name: str, method: str, body: dict[str, Any]) -> Response:
        """XID faults per GPU (kubesim/gpuhealth.py); runs on the loop like every admin request."""
        gpus = self.sim.api(name).gpus
        if gpus is None:
            return _error(409, "this cluster has no GPU health model")
        now = self.sim.clock.now()
        if method == "POST":
            xids, clears = body.get("xid", []), body.get("clear", [])
            if not isinstance(xids, list) or not isinstance(clears, list) or not (xids or clears):
                return _error(
                    400, 'send {"xid": [{"node", "gpu", "code"}]} and/or {"clear": [{"node", "gpu"}]}'
                )
            try:
                for i, item in enumerate([*xids, *clears]):
                    if not isinstance(item, dict):
                        raise GpuFaultError(f"item {i}: an object with node, gpu (and code for xid)")
                    node, gpu = item.get("node"), item.get("gpu")
                    if not isinstance(node, str) or not isinstance(gpu, int) or isinstance(gpu, bool):
                        raise GpuFaultError(f"item {i}: node must be a string and gpu an integer")
                    if i < len(xids):
                        code = item.get("code")
                        if not isinstance(code, int) or isinstance(code, bool):
                            raise GpuFaultError(f"xid[{i}].code must be an integer XID")
                # all valid: apply (a fault naming an unknown node or GPU stops here with 400)
                for item in xids:
                    gpus.xid(item["node"], item["gpu"], item["code"], now)
                for item in clears:
                    gpus.clear(item["node"], item["gpu"])
            except GpuFaultError as e:
                return _error(400, str(e))
        elif method != "GET":
            return _error(405, "use GET or POST")
        return _json({"gpus": gpus.faulty(now)})
