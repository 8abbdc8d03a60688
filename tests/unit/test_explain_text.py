"""explain's first words agree with the job's place in the queue (broker.queue.explain_text)."""

from __future__ import annotations

import pytest

from broker.core.model import ClusterRejection, Code, JobRecord, JobRequest, NoFit, Placement
from broker.queue.explain_text import summary
from broker.queue.queueing import Slot

PLACED = Placement("c1", "H100-80GB", "nvidia.com/gpu", 8, 1, 90)
RECORD = JobRecord(id="~explain", request=JobRequest("probe", gpus_per_pod=8), created_at=0.0, updated_at=0.0)


@pytest.mark.parametrize(
    ("slot", "said"),
    [
        (None, "would place on c1 now"),
        (Slot(RECORD, 1, 0, 0), "would place on c1 now"),
        (Slot(RECORD, 2, 0, 0), "would place on c1 once the 1 job ahead of it is placed"),
        (Slot(RECORD, 4, 0, 3), "would place on c1 once the 3 jobs ahead of it are placed"),
        (
            Slot(RECORD, 1, 0, 0, blocked="tenant ml over its H100-80GB quota 16/16"),
            "held back by a quota (tenant ml over its H100-80GB quota 16/16); on its turn it would place on c1",
        ),
    ],
)
def test_a_placement_is_worded_by_the_jobs_place_in_the_queue(slot: Slot | None, said: str) -> None:
    assert summary(PLACED, slot) == said


def test_no_fit_is_the_diagnosis_a_queued_job_carries() -> None:
    nofit = NoFit(
        1, (ClusterRejection("c1", "health", "drained by root: firmware", None, Code.UNSCHEDULABLE),)
    )
    assert summary(nofit, Slot(RECORD, 2, 0, 0)) == nofit.message
    assert nofit.message == "0/1 clusters are available: 1 drained by root: firmware."
