"""A job's request must fit the annotations a real API server accepts, or the submit is refused (413).

Every Job the broker creates carries the submitted request as JSON (gpufed.io/request) beside a few
more annotations, so that its record can be rebuilt from the cluster after a Redis loss. A real API
server refuses an object whose annotations, keys and values together, exceed 256 KiB
(apimachinery's TotalAnnotationSizeLimitB), so a request larger than REQUEST_BUDGET_BYTES could never
start: it is refused at submit with 413, naming the field that makes it large, instead of being
accepted and failing at create time in the member cluster.

    check(request)      raises errors.TooLarge naming the largest field when over the budget
"""

from __future__ import annotations

import json

from broker.core.errors import TooLarge
from broker.core.k8s_names import REQUEST_ANNOTATION
from broker.core.model import JobRequest
from broker.workload import manifest

TOTAL_ANNOTATION_LIMIT_BYTES = 256 * 1024
# The rest of the budget: the other annotations (idempotency key, federation, hints, kubectl's own).
REQUEST_BUDGET_BYTES = 192 * 1024

_FIELD_NAMES = {"duration_seconds": "durationSeconds", "gpu_products": "gpuProducts"}


def check(request: JobRequest) -> None:
    encoded = manifest.recovery_annotations(request, 0.0, None, None)[REQUEST_ANNOTATION]
    size = len(encoded.encode())
    if size <= REQUEST_BUDGET_BYTES:
        return
    fields = json.loads(encoded)
    largest = max(fields, key=lambda k: len(json.dumps(fields[k]))) if isinstance(fields, dict) else "(body)"
    raise TooLarge(
        _FIELD_NAMES.get(largest, largest),
        f"the request is {size} bytes as the Job's {REQUEST_ANNOTATION} annotation; a member cluster's API "
        f"server takes at most {TOTAL_ANNOTATION_LIMIT_BYTES} bytes of annotations per object, so at most "
        f"{REQUEST_BUDGET_BYTES} bytes are accepted: make this field smaller (e.g. a script in the image "
        "or a ConfigMap instead of an inline command)",
    )
