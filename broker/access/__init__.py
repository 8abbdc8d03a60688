"""Access: who is calling. The credentials checked now (static tokens, OIDC) and the resolution of an
HTTP request's bearer token into a Principal, shared by every HTTP surface (broker.api, broker.ha)."""
