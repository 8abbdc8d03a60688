"""Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`): the few kinds kubectl sends.

kubectl 1.37 sends `DeleteOptions` (kubectl delete, kubectl drain), `policy/v1 Eviction` (kubectl drain),
`authorization.k8s.io/v1 SelfSubjectAccessReview` (kubectl auth can-i), `authentication.k8s.io/v1
SelfSubjectReview` (kubectl auth whoami) and the objects of its typed `kubectl create <kind>` commands as
protobuf, and does not fall back to JSON on a 415. Decoded objects: Namespace, ResourceQuota (hard,
scopes), Role/ClusterRole (rules), RoleBinding/ClusterRoleBinding, PriorityClass, ServiceAccount and
TokenRequest (`kubectl create token`: audiences, expirationSeconds); ObjectMeta's name,
generateName, namespace, labels, annotations and finalizers. A protobuf body is the 4-byte magic `k8s\\0` and a `runtime.Unknown` message: field 1 TypeMeta
(apiVersion = 1, kind = 2), field 2 the raw message, fields 3/4 the content encoding and type. This module
decodes those kinds (and SubjectAccessReview, LocalSubjectAccessReview) into the JSON shape the API handles;
notably not Job, Deployment, ConfigMap or Secret (`kubectl create job` is refused); any other kind is `UnsupportedKind` (the API
answers 415 UnsupportedMediaType, so a client can send JSON instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    """A body that is not a well-formed Kubernetes protobuf envelope."""


class UnsupportedKind(ValueError):
    """A well-formed protobuf body of a kind kubesim does not decode."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield num, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ProtobufError("truncated field")
            yield num, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def _int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _str(v: int | bytes) -> str:
    if not isinstance(v, bytes):
        raise ProtobufError("expected a string field")
    return v.decode("utf-8")


def _msg(v: int | bytes) -> bytes:
    if not isinstance(v, bytes):
        raise ProtobufError("expected a message field")
    return v


def delete_options(raw: bytes) -> Obj:
    """meta.k8s.io/v1 DeleteOptions (generated.proto field numbers)."""
    out: Obj = {}
    for num, v in _fields(raw):
        if num == 1 and isinstance(v, int):
            out["gracePeriodSeconds"] = _int64(v)
        elif num == 2:
            pre: Obj = {}
            for pn, pv in _fields(_msg(v)):
                if pn == 1:
                    pre["uid"] = _str(pv)
                elif pn == 2:
                    pre["resourceVersion"] = _str(pv)
            out["preconditions"] = pre
        elif num == 3 and isinstance(v, int):
            out["orphanDependents"] = bool(v)
        elif num == 4:
            out["propagationPolicy"] = _str(v)
        elif num == 5:
            out.setdefault("dryRun", []).append(_str(v))
    return out


def _map_entry(raw: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for n, v in _fields(raw):
        if n == 1:
            key = _str(v)
        elif n == 2:
            value = _msg(v)
    return key, value


def _object_meta(raw: bytes) -> Obj:
    """ObjectMeta: name 1, generateName 2, namespace 3, labels 11, annotations 12, finalizers 14 (what a
    create sends; server-set fields are ignored)."""
    meta: Obj = {}
    for num, v in _fields(raw):
        if num == 1:
            meta["name"] = _str(v)
        elif num == 2:
            meta["generateName"] = _str(v)
        elif num == 3:
            meta["namespace"] = _str(v)
        elif num in (11, 12):
            k, val = _map_entry(_msg(v))
            meta.setdefault("labels" if num == 11 else "annotations", {})[k] = val.decode("utf-8")
        elif num == 14:
            meta.setdefault("finalizers", []).append(_str(v))
    return meta


def _repeated_strings(raw: bytes, names: dict[int, str]) -> Obj:
    out: Obj = {}
    for n, v in _fields(raw):
        if n in names:
            out.setdefault(names[n], []).append(_str(v))
    return out


def _quantity(raw: bytes) -> str:
    return next((_str(v) for n, v in _fields(raw) if n == 1), "0")


def _namespace(raw: bytes) -> Obj:
    out: Obj = {"metadata": {}}
    for n, v in _fields(raw):
        if n == 1:
            out["metadata"] = _object_meta(_msg(v))
        elif n == 2:
            out["spec"] = _repeated_strings(_msg(v), {1: "finalizers"})
    return out


def _resource_quota(raw: bytes) -> Obj:
    out: Obj = {"metadata": {}, "spec": {}}
    for n, v in _fields(raw):
        if n == 1:
            out["metadata"] = _object_meta(_msg(v))
        elif n == 2:
            spec: Obj = {}
            for sn, sv in _fields(_msg(v)):
                if sn == 1:
                    k, q = _map_entry(_msg(sv))
                    spec.setdefault("hard", {})[k] = _quantity(q)
                elif sn == 2:
                    spec.setdefault("scopes", []).append(_str(sv))
            out["spec"] = spec
    return out


_RULE = {1: "verbs", 2: "apiGroups", 3: "resources", 4: "resourceNames", 5: "nonResourceURLs"}


def _role(raw: bytes) -> Obj:
    out: Obj = {"metadata": {}, "rules": []}
    for n, v in _fields(raw):
        if n == 1:
            out["metadata"] = _object_meta(_msg(v))
        elif n == 2:
            out["rules"].append(_repeated_strings(_msg(v), _RULE))
    return out


def _binding(raw: bytes) -> Obj:
    out: Obj = {"metadata": {}, "subjects": []}
    for n, v in _fields(raw):
        if n == 1:
            out["metadata"] = _object_meta(_msg(v))
        elif n == 2:
            subject = _strings(_msg(v), {1: "kind", 2: "apiGroup", 3: "name", 4: "namespace"})
            out["subjects"].append({k: val for k, val in subject.items() if val})  # JSON omits empty fields
        elif n == 3:
            out["roleRef"] = _strings(_msg(v), {1: "apiGroup", 2: "kind", 3: "name"})
    return out


def _priority_class(raw: bytes) -> Obj:
    out: Obj = {"metadata": {}, "value": 0}
    for n, v in _fields(raw):
        if n == 1:
            out["metadata"] = _object_meta(_msg(v))
        elif n == 2 and isinstance(v, int):
            out["value"] = _int64(v)  # int32: negatives are sign-extended to 64 bits on the wire
        elif n == 3 and isinstance(v, int):
            out["globalDefault"] = bool(v)
        elif n == 4:
            out["description"] = _str(v)
        elif n == 5:
            out["preemptionPolicy"] = _str(v)
    return out


def _service_account(raw: bytes) -> Obj:
    """v1 ServiceAccount (`kubectl create serviceaccount`): metadata = 1 (its secrets are not kept)."""
    return {"metadata": next((_object_meta(_msg(v)) for n, v in _fields(raw) if n == 1), {})}


def _token_request(raw: bytes) -> Obj:
    """authentication.k8s.io/v1 TokenRequest (`kubectl create token`): metadata = 1, spec = 2 (audiences =
    1, boundObjectRef = 3 (not kept), expirationSeconds = 4)."""
    out: Obj = {"metadata": {}, "spec": {}}
    for n, v in _fields(raw):
        if n == 1:
            out["metadata"] = _object_meta(_msg(v))
        elif n == 2:
            for sn, sv in _fields(_msg(v)):
                if sn == 1:
                    out["spec"].setdefault("audiences", []).append(_str(sv))
                elif sn == 4 and isinstance(sv, int):
                    out["spec"]["expirationSeconds"] = _int64(sv)
    return out


_OBJECTS = {
    "ServiceAccount": _service_account,
    "TokenRequest": _token_request,
    "Namespace": _namespace,
    "ResourceQuota": _resource_quota,
    "Role": _role,
    "ClusterRole": _role,
    "RoleBinding": _binding,
    "ClusterRoleBinding": _binding,
    "PriorityClass": _priority_class,
}


def eviction(raw: bytes) -> Obj:
    """policy/v1 Eviction: metadata = 1, deleteOptions = 2."""
    out: Obj = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {}}
    for num, v in _fields(raw):
        if num == 1:
            out["metadata"] = _object_meta(_msg(v))
        elif num == 2:
            out["deleteOptions"] = delete_options(_msg(v))
    return out


_RESOURCE_ATTRS = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}


def _strings(raw: bytes, names: dict[int, str]) -> Obj:
    return {names[n]: _str(v) for n, v in _fields(raw) if n in names}


def access_review(raw: bytes, kind: str) -> Obj:
    """authorization.k8s.io/v1 SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview:
    metadata = 1, spec = 2 (resourceAttributes = 1, nonResourceAttributes = 2; SubjectAccessReviewSpec
    also user = 3, groups = 4, uid = 6)."""
    out: Obj = {"metadata": {}, "spec": {}}
    for num, v in _fields(raw):
        if num == 1:
            out["metadata"] = _object_meta(_msg(v))
        elif num == 2:
            spec: Obj = {}
            for sn, sv in _fields(_msg(v)):
                if sn == 1:
                    spec["resourceAttributes"] = _strings(_msg(sv), _RESOURCE_ATTRS)
                elif sn == 2:
                    spec["nonResourceAttributes"] = _strings(_msg(sv), {1: "path", 2: "verb"})
                elif sn == 3 and kind != "SelfSubjectAccessReview":
                    spec["user"] = _str(sv)
                elif sn == 4 and kind != "SelfSubjectAccessReview":
                    spec.setdefault("groups", []).append(_str(sv))
                elif sn == 6 and kind != "SelfSubjectAccessReview":
                    spec["uid"] = _str(sv)
            out["spec"] = spec
    return out


REVIEW_KINDS = ("SelfSubjectAccessReview", "SubjectAccessReview", "LocalSubjectAccessReview")


def decode(body: bytes) -> Obj:
    """A protobuf request body as a JSON-shaped object (DeleteOptions, Eviction, the access reviews,
    SelfSubjectReview)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic prefix")
    api_version = kind = ""
    raw = b""
    for num, v in _fields(body[len(MAGIC) :]):
        if num == 1:
            for tn, tv in _fields(_msg(v)):
                if tn == 1:
                    api_version = _str(tv)
                elif tn == 2:
                    kind = _str(tv)
        elif num == 2:
            raw = _msg(v)
    if kind == "DeleteOptions":
        return {"apiVersion": api_version or "v1", "kind": kind, **delete_options(raw)}
    if kind == "Eviction":
        return {**eviction(raw), "apiVersion": api_version or "policy/v1"}
    if kind in REVIEW_KINDS:
        return {"apiVersion": api_version, "kind": kind, **access_review(raw, kind)}
    if kind == "SelfSubjectReview":
        return {"apiVersion": api_version, "kind": kind, "metadata": {}}
    if kind == "SelfSubjectRulesReview":  # spec = 2 (namespace = 1)
        spec = next((_strings(_msg(v), {1: "namespace"}) for n, v in _fields(raw) if n == 2), {})
        return {"apiVersion": api_version, "kind": kind, "metadata": {}, "spec": spec}
    if kind in _OBJECTS:
        return {"apiVersion": api_version, "kind": kind, **_OBJECTS[kind](raw)}
    raise UnsupportedKind(f"{api_version}, Kind={kind}" if api_version else kind or "unknown kind")
