"""The exception tree. Exceptions are faults; rejections (NoFit, validation of a job) are data.

GpufedError                     base of everything gpufed raises on purpose
├── ConfigError                 a bad clusters.yaml / setting; the message names file, cluster, field
├── InvalidRequest              a bad job submission; `field` names the offending field
│   └── TooLarge                a submission too large for a member cluster's API server (413)
├── NotFound                    no such job / cluster
├── Conflict                    a state change that lost a race (stale version, already terminal)
│   ├── Fenced                  a write by a control loop whose leader lease (fencing token) is stale
│   └── AlreadyExists           a second live job of a tenant with the same name (409, as kubectl's)
├── MalformedObject             a Kubernetes object the broker cannot read (reported, skipped)
├── ClusterError                a member cluster did not do what was asked
│   ├── ClusterUnreachable      connection refused, timeout, TLS failure
│   │   └── OutcomeUnknown      a write sent but not answered in time: it may have been done
│   ├── ClusterForbidden        401/403: expired or insufficient credentials
│   └── ClusterRejected         4xx other than auth: the cluster refused the object
└── StoreError                  the state store (Redis) failed
    └── Recovering              the store came back empty and the records are being rebuilt: retry
"""

from __future__ import annotations


class GpufedError(Exception):
    """Base of every exception gpufed raises on purpose."""


class ConfigError(GpufedError):
    """Bad configuration. The message names the file, the cluster and the field."""


class InvalidRequest(GpufedError):
    """A bad submission. `field` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


class TooLarge(InvalidRequest):
    """A submission that could never be created in a member cluster: too large (answered 413)."""


class NotFound(GpufedError):
    """No such job or cluster."""


class Conflict(GpufedError):
    """A state change that lost a race or is not allowed from the current state."""


class AlreadyExists(Conflict):
    """A submit whose name a live (not finished) job of the same tenant holds: names are unique among
    live jobs, like a Kubernetes object's in its namespace; a finished job's name may be reused."""


class Fenced(Conflict):
    """A control-loop write refused: a newer leader holds the lease (its fencing token is newer)."""


class MalformedObject(GpufedError):
    """A Kubernetes object that cannot be read; `name` is the object, `field` the bad field."""

    def __init__(self, name: str, field: str, message: str) -> None:
        super().__init__(f"{name}: {field}: {message}")
        self.name = name
        self.field = field
        self.detail = message


class ClusterError(GpufedError):
    """A member cluster did not do what was asked. `cluster` names it; `cause` is the failure as health
    classifies it ("connection refused", "timeout after 5 s", "credentials rejected (401)", "HTTP 503
    ServiceUnavailable"; see broker.health.machine), empty where nobody classified it."""

    def __init__(self, cluster: str, message: str, cause: str = "") -> None:
        super().__init__(f"cluster {cluster}: {message}")
        self.cluster = cluster
        self.cause = cause


class ClusterUnreachable(ClusterError):
    """Connection refused, timed out, or TLS failed."""


class OutcomeUnknown(ClusterUnreachable):
    """A write (POST, PUT, PATCH, DELETE) was sent but its answer did not come in time (a read timeout):
    the member may have done it, or may still do it. Retry the same write (a create by the same name
    answers 409 once it was done) rather than assume it failed."""


class ClusterForbidden(ClusterError):
    """401/403: the broker's credentials for this cluster are expired or insufficient."""


class ClusterRejected(ClusterError):
    """The cluster refused the object (4xx other than auth)."""


class StoreError(GpufedError):
    """The state store failed."""


class Recovering(StoreError):
    """The state store lost its data and the job records are being rebuilt from the member clusters;
    a submit now could run a retried job twice, so it is refused until the rebuild is done."""
