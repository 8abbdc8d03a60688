"""Tenancy: who calls (tokens, roles), the RBAC a member needs, tenant namespaces and their quotas.

Pure: no I/O, no clock.
"""
