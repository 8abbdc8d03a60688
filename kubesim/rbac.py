"""Authentication of bearer tokens to users and RBAC authorization (rbac.authorization.k8s.io/v1).

Owns:
- `Identity` (user name and groups) and `Attributes` (what a request does: verb, API group, resource,
  subresource, namespace, name; or a non-resource path), `attributes_of(method, path, query)` for a request.
- `authorize(store, identity, attrs)`: RBAC as the real authorizer evaluates it. ClusterRoleBindings grant
  their ClusterRole everywhere; RoleBindings grant their Role or ClusterRole in their namespace. Rules match
  on verbs, apiGroups, resources (`*`, `pods/log`, `*/scale`), resourceNames, and nonResourceURLs (`*`
  suffix). Subjects: User, Group, ServiceAccount (`system:serviceaccount:<ns>:<name>`, groups
  `system:serviceaccounts[:<ns>]`). Members of `system:masters` are allowed everything (the admin token's
  identity). Built in, as the bootstrap policy grants every authenticated user: discovery and health
  paths (system:discovery, system:public-info-viewer) and creating SelfSubjectAccessReviews and
  SelfSubjectRulesReviews (system:basic-user). Bootstrap ClusterRoles (cluster-admin, view, edit...) are
  not created; make the roles you need.
- `forbidden_message(...)`: the real 403 text, e.g. `nodes is forbidden: User "x" cannot list resource
  "nodes" in API group "" at the cluster scope`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubesim.store import ObjectStore

Obj = dict[str, Any]
RBAC_GROUP = "rbac.authorization.k8s.io"
ROLES, CLUSTER_ROLES = f"roles.{RBAC_GROUP}", f"clusterroles.{RBAC_GROUP}"
ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS = f"rolebindings.{RBAC_GROUP}", f"clusterrolebindings.{RBAC_GROUP}"
ADMIN_USER = "kubesim-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
_PUBLIC_PATHS = ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi")
_SELF_REVIEWS = frozenset({"selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews"})


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    groups: tuple[str, ...] = ()

    @property
    def all_groups(self) -> tuple[str, ...]:
        return (*self.groups, AUTHENTICATED) if AUTHENTICATED not in self.groups else self.groups


ADMIN = Identity(ADMIN_USER, (MASTERS, AUTHENTICATED))


@dataclass(frozen=True, slots=True)
class Attributes:
    verb: str
    resource_request: bool
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


@dataclass(slots=True)
class Decision:
    allowed: bool
    reason: str = ""
    extra: list[str] = field(default_factory=list)


def attributes_of(method: str, path: str, watch: bool) -> Attributes:
    """The authorization attributes of an API request, as the real request-info resolver derives them."""
    segs = [s for s in path.split("/") if s]
    method_verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "get")
    if not segs or segs[0] not in ("api", "apis") or len(segs) < (2 if segs[0] == "api" else 3):
        return Attributes(method_verb if method != "GET" else "get", False, path=path)
    group = "" if segs[0] == "api" else segs[1]
    rest = segs[2:] if segs[0] == "api" else segs[3:]
    if not rest:
        return Attributes("get" if method == "GET" else method_verb, False, path=path)
    is_watch_path = rest[0] == "watch"
    if is_watch_path:
        rest = rest[1:]
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if resource == "namespaces" and name:
        namespace = name  # a namespace object is authorized in itself, as on a real server
    verb = method_verb
    if method == "GET":
        verb = "watch" if is_watch_path or watch else "get" if name else "list"
    elif method == "DELETE" and not name:
        verb = "deletecollection"
    return Attributes(verb, True, group, resource, sub, namespace, name, path)


def _matches(values: list[Any] | None, want: str) -> bool:
    vals = values or []
    return "*" in vals or want in vals


def _resource_matches(rule_resources: list[Any] | None, resource: str, sub: str) -> bool:
    full = f"{resource}/{sub}" if sub else resource
    for r in rule_resources or []:
        if r in ("*", full):
            return True
        if sub and r == f"*/{sub}":
            return True
        if r.endswith("/*") and r[:-2] == resource and sub:
            return True
    return False


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    if not _matches(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource_request:
        for url in rule.get("nonResourceURLs") or []:
            if url in ("*", attrs.path) or (url.endswith("*") and attrs.path.startswith(url[:-1])):
                return True
        return False
    if not _matches(rule.get("apiGroups"), attrs.group):
        return False
    if not _resource_matches(rule.get("resources"), attrs.resource, attrs.subresource):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _subject_matches(subject: Obj, ident: Identity) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == ident.user)
    if kind == "Group":
        return name in ident.all_groups
    if kind == "ServiceAccount":
        return ident.user == f"system:serviceaccount:{subject.get('namespace', '')}:{name}"
    return False


def _role_rules(store: ObjectStore, ref: Obj, namespace: str) -> tuple[list[Obj], str]:
    kind, name = ref.get("kind"), ref.get("name", "")
    if kind == "ClusterRole":
        role = store.find(CLUSTER_ROLES, "", name)
    elif kind == "Role":
        role = store.find(ROLES, namespace, name)
    else:
        role = None
    return (list((role or {}).get("rules") or []), f'{kind} "{name}"')


def _subject_text(ident: Identity, binding: Obj) -> str:
    for s in binding.get("subjects") or []:
        if _subject_matches(s, ident):
            return f'{s.get("kind")} "{s.get("name")}"'
    return f'User "{ident.user}"'


def authorize(store: ObjectStore, ident: Identity, attrs: Attributes) -> Decision:
    """Whether `ident` may do `attrs`, with the RBAC reason (which binding and role allowed it)."""
    if MASTERS in ident.groups:
        return Decision(True)
    if not attrs.resource_request and (
        attrs.path in _PUBLIC_PATHS or any(attrs.path.startswith(p + "/") for p in _PUBLIC_PATHS)
    ):
        return Decision(True, "allowed by the system:discovery ClusterRole")
    if (
        attrs.resource_request
        and attrs.group in ("authorization.k8s.io", "authentication.k8s.io")
        and attrs.resource in _SELF_REVIEWS
        and attrs.verb == "create"
    ):
        return Decision(True, "allowed by the system:basic-user ClusterRole")
    bindings, _ = store.list(CLUSTER_ROLE_BINDINGS)
    for b in bindings:
        if any(_subject_matches(s, ident) for s in b.get("subjects") or []):
            rules, role = _role_rules(store, b.get("roleRef") or {}, "")
            if any(rule_allows(r, attrs) for r in rules):
                return Decision(
                    True,
                    f'RBAC: allowed by ClusterRoleBinding "{b["metadata"]["name"]}" of {role} to '
                    f"{_subject_text(ident, b)}",
                )
    if attrs.namespace:
        bindings, _ = store.list(ROLE_BINDINGS, attrs.namespace)
        for b in bindings:
            if any(_subject_matches(s, ident) for s in b.get("subjects") or []):
                rules, role = _role_rules(store, b.get("roleRef") or {}, attrs.namespace)
                if any(rule_allows(r, attrs) for r in rules):
                    return Decision(
                        True,
                        f'RBAC: allowed by RoleBinding "{b["metadata"]["name"]}/{attrs.namespace}" of '
                        f"{role} to {_subject_text(ident, b)}",
                    )
    return Decision(False)


def rules_for(store: ObjectStore, ident: Identity, namespace: str) -> tuple[list[Obj], list[Obj]]:
    """SelfSubjectRulesReview: the resource and non-resource rules that apply to `ident` in `namespace`
    (cluster-wide bindings plus the namespace's RoleBindings, and the built-in ones)."""
    if MASTERS in ident.groups:
        return (
            [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        )
    rules: list[Obj] = [
        {
            "verbs": ["create"],
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        },
        {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
    ]
    non_resource: list[Obj] = [
        {"verbs": ["get"], "nonResourceURLs": [*_PUBLIC_PATHS, *(p + "/*" for p in _PUBLIC_PATHS)]}
    ]
    bindings = [(b, "") for b in store.list(CLUSTER_ROLE_BINDINGS)[0]]
    if namespace:
        bindings += [(b, namespace) for b in store.list(ROLE_BINDINGS, namespace)[0]]
    for b, ns in bindings:
        if any(_subject_matches(s, ident) for s in b.get("subjects") or []):
            for r in _role_rules(store, b.get("roleRef") or {}, ns)[0]:
                if r.get("nonResourceURLs"):
                    non_resource.append(
                        {"verbs": r.get("verbs") or [], "nonResourceURLs": r["nonResourceURLs"]}
                    )
                else:
                    rules.append(
                        {k: r[k] for k in ("verbs", "apiGroups", "resources", "resourceNames") if r.get(k)}
                    )
    return rules, non_resource


def forbidden_message(ident: Identity, attrs: Attributes) -> tuple[str, Obj]:
    """The real server's 403 message and Status details for a denied request."""
    if not attrs.resource_request:
        return f'forbidden: User "{ident.user}" cannot {attrs.verb} path "{attrs.path}"', {}
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    why = (
        f'User "{ident.user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}" {where}'
    )
    qualified = attrs.resource if not attrs.group else f"{attrs.resource}.{attrs.group}"
    head = f'{qualified} "{attrs.name}" is forbidden' if attrs.name else f"{qualified} is forbidden"
    details: Obj = {"group": attrs.group, "kind": attrs.resource}
    if attrs.name:
        details["name"] = attrs.name
    return f"{head}: {why}", details


def review_attributes(spec: Obj) -> Attributes:
    """Attributes from a SubjectAccessReview spec (resourceAttributes or nonResourceAttributes)."""
    ra = spec.get("resourceAttributes")
    if isinstance(ra, dict):
        return Attributes(
            str(ra.get("verb") or ""),
            True,
            str(ra.get("group") or ""),
            str(ra.get("resource") or ""),
            str(ra.get("subresource") or ""),
            str(ra.get("namespace") or ""),
            str(ra.get("name") or ""),
        )
    nra = spec.get("nonResourceAttributes") or {}
    return Attributes(str(nra.get("verb") or ""), False, path=str(nra.get("path") or ""))
