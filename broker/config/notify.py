"""settings.tenants.<name>.notify: a tenant's webhook for its jobs' transitions and the secret that signs
every delivery of its jobs (docs/batch.md "Notifications").

    tenants:
      ml-research:
        notify:
          webhook: https://hooks.example.com/gpufed     # optional: every job of the tenant
          on: [SUCCEEDED, FAILED]                       # the states that are delivered (default these)
          secretEnv: GPUFED_ML_RESEARCH_WEBHOOK_SECRET  # or secret: ... (signs X-Gpufed-Signature)

Owns the model (errors name the field) and `tenant_notify`, the map the notifier reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, SecretStr, model_validator

from broker.core.batch_fields import Notify
from broker.core.model import JobState
from broker.core.notify import TenantNotify

__all__ = ["TenantNotifyConfig", "tenant_notify"]

_STATES = tuple(s.value for s in JobState if s is not JobState.PENDING)


class TenantNotifyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    webhook: AnyHttpUrl | None = None
    on: list[str] = Field(default_factory=lambda: ["SUCCEEDED", "FAILED"], min_length=1)
    secret: SecretStr | None = None
    secret_env: str | None = Field(default=None, alias="secretEnv", min_length=1)

    @model_validator(mode="after")
    def _valid(self) -> TenantNotifyConfig:
        for i, state in enumerate(self.on):
            if state.upper() not in _STATES:
                raise ValueError(f"on[{i}]: {state!r} is not a job state; one of {', '.join(_STATES)}")
        if self.secret is not None and self.secret_env is not None:
            raise ValueError("give secret or secretEnv, not both")
        return self

    def resolved(self, env: Mapping[str, str]) -> TenantNotify:
        secret = self.secret.get_secret_value() if self.secret is not None else ""
        if self.secret_env is not None:
            secret = env.get(self.secret_env, "")
        target = Notify(str(self.webhook), tuple(s.upper() for s in self.on)) if self.webhook else None
        return TenantNotify(target, secret)


def tenant_notify(
    configs: Mapping[str, TenantNotifyConfig | None], env: Mapping[str, str] | None = None
) -> dict[str, TenantNotify]:
    """Per tenant with a notify block: its default target and secret (secretEnv read from `env`)."""
    source = os.environ if env is None else env
    return {t: c.resolved(source) for t, c in configs.items() if c is not None}
