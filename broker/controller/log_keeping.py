"""Keep an attempt's container log when the attempt ends (issue 45; broker.workload.attempt_log).

keep_attempt_log(store, gateway, record, namespace)   read the last lines of the attempt's pods
    from its member and keep them with the job; called on the cluster's worker thread where the
    attempt ends: the status sync recording a SUCCEEDED/FAILED (the member removes the Job after
    finishedJobTtlSeconds), and a stop that moves the job (migrate, drain, member trouble: its pods
    are deleted). Nothing to read (no log source, no pods, the member not answering) keeps nothing,
    and the API then says so. Never raises: a lost log is not a lost job.
"""

from __future__ import annotations

import logging

from broker.core.errors import ClusterError, StoreError
from broker.core.model import JobRecord
from broker.core.ports import AttemptLogStore, PodLogs
from broker.workload import attempt_log

log = logging.getLogger(__name__)


def keep_attempt_log(store: object, gateway: object, record: JobRecord, namespace: str) -> bool:
    """Whether a log was kept for `record`'s attempt."""
    cluster = record.cluster
    if not cluster or not isinstance(store, AttemptLogStore) or not isinstance(gateway, PodLogs):
        return False
    try:
        pods = gateway.job_pods(cluster, namespace, record.id, record.attempt)
        if not pods:
            return False
        data = attempt_log.collect(
            pods, lambda pod: gateway.pod_logs(cluster, namespace, pod, tail_lines=attempt_log.TAIL_LINES)
        )
        store.put_attempt_log(record.id, record.attempt, data)
    except (ClusterError, StoreError) as exc:
        log.info("the log of attempt %d of %s was not kept: %s", record.attempt, record.id, exc)
        return False
    return True
