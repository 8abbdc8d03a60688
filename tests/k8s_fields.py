"""Typed reads of the official kubernetes client's models, for tests.

The client's models declare nearly every field Optional (the server may leave any of them out), so a test
that reads a field the server must have set goes through these helpers: each one fails the test with the
field's name where the field is missing, instead of an AttributeError on None, and gives mypy the
narrowed type.

    present(value, field)      the value, or a failure naming `field` when it is None
    meta(obj) / name_of(obj) / labels_of(obj) / rv_of(obj)   an object's metadata, name, labels, resourceVersion
    list_rv(lst)               a list's resourceVersion
    sent_as(model, manifest)   a plain manifest passed where the client's signature names a model
    as_dict(value)             a response the client types as `object` (deletes, custom objects)
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, cast

from kubernetes import client

T = TypeVar("T")


class HasObjectMeta(Protocol):
    """Any model with ObjectMeta: V1Node, V1Pod, V1Job, V1PodTemplateSpec, ..."""

    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


class HasListMeta(Protocol):
    """Any list model: V1NodeList, V1PodList, V1JobList, ..."""

    @property
    def metadata(self) -> client.V1ListMeta | None: ...


def present(value: T | None, field: str) -> T:
    """`value`, failing the test (naming `field`) when the server left it out."""
    assert value is not None, f"{field} is missing"
    return value


def meta(obj: HasObjectMeta) -> client.V1ObjectMeta:
    """The object's metadata."""
    return present(obj.metadata, f"{type(obj).__name__}.metadata")


def name_of(obj: HasObjectMeta) -> str:
    """The object's metadata.name."""
    return present(meta(obj).name, f"{type(obj).__name__}.metadata.name")


def labels_of(obj: HasObjectMeta) -> dict[str, str]:
    """The object's metadata.labels."""
    labels: dict[str, str] = present(meta(obj).labels, f"{type(obj).__name__}.metadata.labels")
    return labels


def rv_of(obj: HasObjectMeta) -> str:
    """The object's metadata.resourceVersion."""
    return present(meta(obj).resource_version, f"{type(obj).__name__}.metadata.resourceVersion")


def list_rv(lst: HasListMeta) -> str:
    """The list's metadata.resourceVersion (where a watch of it starts)."""
    list_meta = present(lst.metadata, f"{type(lst).__name__}.metadata")
    return present(list_meta.resource_version, f"{type(lst).__name__}.metadata.resourceVersion")


def sent_as(model: type[T], manifest: dict[str, Any]) -> T:
    """`manifest`, unchanged, typed as the `model` a client method's signature asks for.

    The client's methods validate their body with pydantic, which takes a plain dict as well as a model;
    only their annotations say the model. Tests send manifests as dicts, as a user would.
    """
    return cast(T, manifest)


def as_dict(value: object) -> dict[str, Any]:
    """A response the client types as `object` but returns as a decoded JSON object."""
    assert isinstance(value, dict), f"expected a JSON object, got {type(value).__name__}"
    return value
