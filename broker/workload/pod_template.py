"""The pod-template pieces a job may carry into its member cluster, as wire models.

Owns the subset of core/v1 the broker keeps and writes unchanged into the Job it creates: EnvVar (a value,
or a key of a ConfigMap/Secret by name, or a fieldRef), EnvFromSource (ConfigMaps/Secrets by name),
Volume (configMap, secret, emptyDir only: the broker cannot carry storage between clusters) and
VolumeMount. Field names and shapes are Kubernetes' (camelCase as in a manifest); anything else is refused
by name (extra fields forbidden). Pure: pydantic only.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["EnvFromSource", "EnvVar", "Volume", "VolumeMount", "dump"]

_C_IDENTIFIER = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"  # what the API server accepts as an env var name
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_ENV_VALUE_MAX = 32 * 1024


class _K8s(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class KeyRef(_K8s):
    """configMapKeyRef / secretKeyRef: one key of an object named in the job's namespace."""

    name: str = Field(pattern=_DNS_SUBDOMAIN)
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    optional: bool | None = None


class FieldRef(_K8s):
    field_path: str = Field(alias="fieldPath", min_length=1, max_length=256)
    api_version: str | None = Field(default=None, alias="apiVersion")


class EnvVarSource(_K8s):
    config_map_key_ref: KeyRef | None = Field(default=None, alias="configMapKeyRef")
    secret_key_ref: KeyRef | None = Field(default=None, alias="secretKeyRef")
    field_ref: FieldRef | None = Field(default=None, alias="fieldRef")

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        given = [x for x in (self.config_map_key_ref, self.secret_key_ref, self.field_ref) if x is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of configMapKeyRef, secretKeyRef, fieldRef")
        return self


class EnvVar(_K8s):
    name: str = Field(pattern=_C_IDENTIFIER, max_length=253)
    value: str | None = Field(default=None, max_length=_ENV_VALUE_MAX)
    value_from: EnvVarSource | None = Field(default=None, alias="valueFrom")

    @model_validator(mode="after")
    def _value_or_from(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("give value or valueFrom, not both")
        return self


class ObjectRef(_K8s):
    name: str = Field(pattern=_DNS_SUBDOMAIN)
    optional: bool | None = None


class EnvFromSource(_K8s):
    prefix: str | None = Field(default=None, max_length=253)
    config_map_ref: ObjectRef | None = Field(default=None, alias="configMapRef")
    secret_ref: ObjectRef | None = Field(default=None, alias="secretRef")

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvFromSource:
        if (self.config_map_ref is None) == (self.secret_ref is None):
            raise ValueError("give exactly one of configMapRef, secretRef")
        return self


class KeyToPath(_K8s):
    key: str = Field(min_length=1, max_length=253)
    path: str = Field(min_length=1, max_length=4096)
    mode: int | None = Field(default=None, ge=0, le=0o777)


class ConfigMapVolume(_K8s):
    name: str = Field(pattern=_DNS_SUBDOMAIN)
    items: list[KeyToPath] | None = Field(default=None, max_length=256)
    default_mode: int | None = Field(default=None, alias="defaultMode", ge=0, le=0o777)
    optional: bool | None = None


class SecretVolume(_K8s):
    secret_name: str = Field(alias="secretName", pattern=_DNS_SUBDOMAIN)
    items: list[KeyToPath] | None = Field(default=None, max_length=256)
    default_mode: int | None = Field(default=None, alias="defaultMode", ge=0, le=0o777)
    optional: bool | None = None


class EmptyDirVolume(_K8s):
    medium: str | None = Field(default=None, pattern=r"^(|Memory)$")
    size_limit: str | None = Field(default=None, alias="sizeLimit", max_length=64)


class Volume(_K8s):
    """A volume the broker can carry to any member cluster: ConfigMaps and Secrets by name (they must
    exist there), or scratch space."""

    name: str = Field(pattern=_DNS_LABEL)
    config_map: ConfigMapVolume | None = Field(default=None, alias="configMap")
    secret: SecretVolume | None = None
    empty_dir: EmptyDirVolume | None = Field(default=None, alias="emptyDir")

    @model_validator(mode="after")
    def _exactly_one(self) -> Volume:
        if sum(x is not None for x in (self.config_map, self.secret, self.empty_dir)) != 1:
            raise ValueError("give exactly one of configMap, secret, emptyDir")
        return self


class VolumeMount(_K8s):
    name: str = Field(pattern=_DNS_LABEL)
    mount_path: str = Field(alias="mountPath", min_length=1, max_length=4096)
    sub_path: str | None = Field(default=None, alias="subPath", max_length=4096)
    read_only: bool | None = Field(default=None, alias="readOnly")


def dump(model: BaseModel) -> dict[str, Any]:
    """The object as a manifest carries it: camelCase, unset fields left out."""
    return model.model_dump(by_alias=True, exclude_none=True)
