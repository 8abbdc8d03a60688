"""Tenancy: who calls (static tokens, OIDC), what each caller may do, and the audit trail of what they did.

Modules here today: oidc_claims (pure: verified claims -> caller), oidc (token verification with PyJWT
over a key source), credentials (the live, reloadable set of credentials the API checks), auth_config
(the `auth.oidc` and `settings.audit` models), audit (pure: the audit record, its query, and the records
derived from job events), audit_writer (the background writer that hands records to their sinks, and
the follower of the job event stream).
"""
