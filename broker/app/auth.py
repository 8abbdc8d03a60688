"""Composition root, part two: credentials and the audit trail, built from the config and kept current.

AuthRuntime(cfg, tokens, store, reload_seconds)
    credentials   broker.access.credentials.Credentials for the API: the static tokens table and, with
                  `auth.oidc`, an OidcAuthenticator over the issuer's keys (adapters.oidc_keys); None for
                  --insecure-no-auth
    writer, log   the audit trail: records go, off the request path, to the Redis stream and to the
                  JSON-lines file `settings.audit.logFile` (adapters.audit_store); `log` serves /v1/audit
    auditor       the broker's own acts (preemption, failover, budget stop) from the job event stream
    start()/stop()  the tokens-file watcher and the auditor threads (the writer is flushed on stop)
    apply_config(old, new)  a changed clusters.yaml (broker.config.reload): a changed `auth` section
                  takes effect at once (new tokens file, new OIDC settings), and the reload is audited.
                  It is checked here first (the tokens file loads): refused, no process changes; applied,
                  `followers` (the API processes of settings.apiProcesses, broker.app.api_workers) are
                  replaced by processes that read the new section, and the log line names every process
                  that applied it
    config_refused(message) a clusters.yaml that did not load, audited as a failed reload

The tokens file is watched on its own (every `reload_seconds`, by modification time, size and inode, so
a Kubernetes Secret's symlink swap is seen): a token removed from it is refused from the next look on.
A file that does not load keeps the tokens in force and is logged and audited. JWKS keys rotate by
themselves (adapters.oidc_keys).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from adapters.audit_store import JsonLinesFile, RedisAuditLog
from adapters.oidc_keys import IssuerKeys
from adapters.redis_store import RedisStateStore
from broker.access.credentials import Credentials
from broker.api.audit_writer import AuditWriter, EventAuditor
from broker.config.settings import AuthConfig, FleetConfig, load_tokens
from broker.core.errors import ConfigError
from broker.tenancy.audit import AuditRecord, AuditSink
from broker.tenancy.auth import TokenTable
from broker.tenancy.oidc import OidcAuthenticator

__all__ = ["AuthRuntime", "oidc_authenticator", "token_table", "with_tokens_file"]

log = logging.getLogger(__name__)

RELOADER = "system:config-reload"


def token_table(cfg: FleetConfig, insecure_no_auth: bool, warn: bool = True) -> TokenTable | None:
    """The API's tokens (auth.tokensFile), or None for an explicit --insecure-no-auth; neither is an error.
    `warn`: say that the API is open (once per broker: the check before start-up passes False)."""
    if cfg.auth is not None:
        if insecure_no_auth:
            raise ConfigError("auth is set (tokensFile or oidc) and --insecure-no-auth was given: choose one")
        return load_tokens(cfg.auth.tokens_file) if cfg.auth.tokens_file else TokenTable({})  # OIDC only
    if insecure_no_auth:
        if warn:
            log.warning("serving WITHOUT authentication (--insecure-no-auth): every caller is an admin")
        return None
    raise ConfigError(
        "no authentication configured: set auth.tokensFile or auth.oidc in the config (docs/tenancy.md), "
        "or pass --insecure-no-auth for local play"
    )


def with_tokens_file(cfg: FleetConfig, tokens_file: str) -> FleetConfig:
    """The config with GPUFED_TOKENS_FILE (the Helm chart's mounted Secret) as auth.tokensFile; the file's
    auth.oidc is kept."""
    oidc = cfg.auth.oidc if cfg.auth is not None else None
    return cfg.model_copy(
        update={"auth": AuthConfig.model_validate({"tokensFile": tokens_file, "oidc": oidc})}
    )


def oidc_authenticator(auth: AuthConfig | None) -> OidcAuthenticator | None:
    if auth is None or auth.oidc is None:
        return None
    o = auth.oidc
    keys = IssuerKeys(o.issuer_url, min_refetch_seconds=o.keys_refetch_seconds)
    return OidcAuthenticator(o.policy(), keys, leeway_seconds=o.clock_skew_seconds)


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class AuthRuntime:
    def __init__(
        self,
        cfg: FleetConfig,
        tokens: TokenTable | None,
        store: RedisStateStore,
        reload_seconds: float | None = None,
        follow_events: bool = True,
    ) -> None:
        """`tokens` None: --insecure-no-auth (no credentials; the trail is still kept). `follow_events`:
        record the broker's own acts from the job event stream."""
        audit = cfg.settings.audit
        self.log = RedisAuditLog(
            store.client,
            store.prefix,
            retention_seconds=audit.retention_days * 86400,
            max_records=audit.max_records,
        )
        sinks: list[AuditSink] = [self.log]
        self.file = JsonLinesFile(audit.log_file) if audit.log_file is not None else None
        if self.file is not None:
            sinks.append(self.file)
        self.writer = AuditWriter(sinks)
        self._auth = cfg.auth
        self.credentials = (
            None if tokens is None else Credentials(static=tokens, oidc=oidc_authenticator(cfg.auth))
        )
        self._tokens_file = cfg.auth.tokens_file if cfg.auth is not None else None
        self._seen = _stamp(self._tokens_file)
        interval = cfg.settings.config_reload_seconds if reload_seconds is None else reload_seconds
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gpufed-tokens-reload", daemon=True)
        self.auditor: EventAuditor | None = None
        if follow_events:

            def tenant_of(job_id: str) -> str:
                record = store.get_job(job_id)
                return record.request.tenant if record is not None else ""

            self.auditor = EventAuditor(
                lambda after, block: store.read_events(None, after=after, block_ms=block),
                tenant_of,
                self.log,
                start=store.last_event_id,  # a new trail starts now: past events are not replayed
                also=[self.file] if self.file is not None else [],
            )
        self.last_error: str | None = None
        # the other processes that serve requests, given the new auth section: returns which applied it
        self.followers: Callable[[], str] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self.credentials is not None and self._interval > 0:
            self._thread.start()
        if self.auditor is not None:
            self.auditor.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)
        if self.auditor is not None:
            self.auditor.stop()
        self.writer.close()

    # ------------------------------------------------------------------ reloads

    def _audit_reload(self, what: str, ok: bool, reason: str) -> None:
        self.writer.record(
            AuditRecord(
                at=time.time(),
                subject=RELOADER,
                tenant="",
                role="system",
                verb="reload",
                object=what,
                outcome="success" if ok else "failure",
                reason=reason,
            )
        )

    def check_tokens_file(self) -> bool:
        """One look at the tokens file: True when a changed file was loaded and is now in force."""
        path = self._tokens_file
        stamp = _stamp(path)
        if path is None or self.credentials is None or stamp == self._seen:
            return False
        self._seen = stamp
        try:
            table = load_tokens(path)
        except ConfigError as exc:
            self.last_error = str(exc)
            log.warning("%s changed but was not applied: %s; the tokens in force are kept", path, exc)
            self._audit_reload("auth.tokensFile", False, str(exc))
            return False
        self.last_error = None
        self.credentials.replace_static(table)
        log.info("%s reloaded: %d token(s)", path, len(table))
        self._audit_reload("auth.tokensFile", True, f"{len(table)} token(s) in force")
        return True

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.check_tokens_file()
            except Exception:  # a reload must never end the broker
                log.exception("reloading the tokens file failed")

    def apply_config(self, old: FleetConfig, new: FleetConfig, changed: Sequence[str] = ()) -> None:
        """A clusters.yaml that loaded: audited; its `auth` section, when it changed, in force now."""
        auth_changed = old.auth != new.auth
        what = ", ".join(changed) if changed else "no member cluster changed"
        if auth_changed and self.credentials is not None and new.auth is not None:
            try:
                table = load_tokens(new.auth.tokens_file) if new.auth.tokens_file else TokenTable({})
            except ConfigError as exc:
                log.warning("clusters.yaml: auth changed but was not applied: %s", exc)
                self._audit_reload("clusters.yaml auth", False, str(exc))
                return
            self.credentials.replace(table, oidc_authenticator(new.auth))
            self._tokens_file = new.auth.tokens_file
            self._seen = _stamp(self._tokens_file)
            self._auth = new.auth
            where = f"the broker process ({os.getpid()})"
            if self.followers is not None:
                where += " and " + self.followers()
            log.info(
                "clusters.yaml: auth reloaded (%d token(s), oidc %s) in %s",
                len(table),
                "on" if new.auth.oidc else "off",
                where,
            )
            what += f"; auth reloaded in {where}"
        elif auth_changed:
            log.warning("clusters.yaml: auth changed: turning authentication on or off takes a restart")
        self._audit_reload("clusters.yaml", True, what)

    def config_refused(self, message: str) -> None:
        self._audit_reload("clusters.yaml", False, message)
