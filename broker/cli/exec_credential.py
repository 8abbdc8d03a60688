"""The credential plugin lives in the client now (broker.client.exec_credential); this name stays for imports."""

from broker.client.exec_credential import API_VERSIONS, TIMEOUT_SECONDS, exec_token

__all__ = ["API_VERSIONS", "TIMEOUT_SECONDS", "exec_token"]
