"""The workload kinds ML teams submit beside batch/v1 Job: JobSet, TrainJob, PyTorchJob and RayJob.

One small adapter per kind (jobset.py, trainjob.py, pytorchjob.py, rayjob.py), found by apiVersion and kind
in registry.py: the demand it asks the placer for (demand.py: pods per role, GPUs or MIG per pod, which
roles are gang-placed, priority and queue), the pod templates level 2 writes its hints into (member.py), and
the kind's status read back as a WorkloadStatus (follow.py). Pure: no I/O, no clock.
"""
