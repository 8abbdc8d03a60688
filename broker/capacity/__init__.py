"""Capacity: Kubernetes objects -> NodeFacts -> ClusterSummary, DRA devices, the fleet view's node rows.

Pure: no I/O, no clock.
"""
