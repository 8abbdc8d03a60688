"""Tenancy: who calls (static tokens, OIDC claims) in which role, the audit record of what they did, and
the tenants' namespaces, quotas and RBAC inside the member clusters.

Pure: no I/O, no clock (the live credentials and the audit writer's thread are in broker.api).
"""
