"""One TLS context per member cluster, built once, instead of one per connection.

Owns tls_context(cfg), the context a kubeconfig describes, and share_tls_context(api, cfg): the
kubernetes client hands urllib3 the CA file and the client certificate as pool arguments, and urllib3 then builds a new ssl.SSLContext and loads the CA (and the
client certificate) for every connection it opens. At 1,000 clusters x 10 connections that is 10,000
contexts at cold start and one more for every reconnect (seen at 200 clusters: about a tenth of one
shard's threads inside SSLContext creation or CA loading). Here the cluster's pool manager is rebuilt
with one prepared context holding the same trust and client certificate; verification is unchanged
(certificate required unless the kubeconfig says insecure-skip-tls-verify, the host name checked by
urllib3 as before). Proxied clusters keep the client's own pool manager.
"""

from __future__ import annotations

import ssl

import urllib3
from kubernetes import client
from urllib3.util.ssl_ import create_urllib3_context

# Pool arguments the prepared context replaces (urllib3 would load them into it on every connection).
_REPLACED = ("ca_certs", "ca_cert_data", "cert_file", "key_file")


def tls_context(cfg: client.Configuration) -> ssl.SSLContext:
    """The TLS context a cluster's Configuration describes: its CA (or the system's), its client
    certificate, verification off only where the kubeconfig says insecure-skip-tls-verify. The same
    context serves the cluster's synchronous client and its watches (adapters.kube_async)."""
    verify = bool(cfg.verify_ssl)
    ctx = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE)
    if verify:
        if cfg.ssl_ca_cert or cfg.ca_cert_data:
            ctx.load_verify_locations(cafile=cfg.ssl_ca_cert, cadata=cfg.ca_cert_data)
        else:
            ctx.load_default_certs()
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def share_tls_context(api: client.ApiClient, cfg: client.Configuration) -> None:
    """Give this cluster's ApiClient one SSLContext for all its connections (HTTPS, unproxied only)."""
    rest = api.rest_client
    manager = rest.pool_manager
    if type(manager) is not urllib3.PoolManager or not str(cfg.host).startswith("https://"):
        return
    ctx = tls_context(cfg)
    kwargs = {k: v for k, v in manager.connection_pool_kw.items() if k not in _REPLACED}
    rest.pool_manager = urllib3.PoolManager(ssl_context=ctx, **kwargs)
    manager.clear()
