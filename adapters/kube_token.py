"""A member's bearer token as the kubeconfig's refresh hook hands it out, read at most every
BEARER_RECHECK_SECONDS and at once after a 401.

The kubernetes client calls a Configuration's `refresh_api_key_hook` before every request. The kubeconfig
loader's hook re-applies the whole kubeconfig to the Configuration each time (host, TLS files, the
proxies read from the environment) and fetches a new token only when the one it has expires within five
minutes (an exec plugin's, OIDC). Run per request it showed in the controller's profile in a burst of Job
creates (docs/benchmarks.md, 2026-12-06), and on the async side it was a quarter of a poller shard's idle
CPU at 1,000 members.
A recheck every ten seconds keeps the five-minute margin; a 401 makes the next request run it at once
(the token was rotated).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BEARER_RECHECK_SECONDS", "RecheckedHook", "recheck_token_hook", "token_rejected"]

BEARER_RECHECK_SECONDS = 10.0


class RecheckedHook:
    """A refresh hook run at most every `every` seconds, and on the first call after forget()."""

    def __init__(
        self, hook: Callable[[Any], None], every: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.hook, self._every, self._clock = hook, every, clock
        self._at = -math.inf
        self.runs = 0

    def __call__(self, configuration: Any) -> None:
        now = self._clock()
        if now - self._at < self._every:
            return
        self._at = now
        self.runs += 1
        self.hook(configuration)
        # the loader's hook installs itself again as it re-applies the kubeconfig: keep it inside this one
        installed = getattr(configuration, "refresh_api_key_hook", None)
        if installed is not self:
            if installed is not None:
                self.hook = installed
            configuration.refresh_api_key_hook = self

    def forget(self) -> None:
        self._at = -math.inf


def recheck_token_hook(configuration: Any, every: float = BEARER_RECHECK_SECONDS) -> None:
    """Wrap the Configuration's refresh hook (if it has one) in a RecheckedHook."""
    hook = getattr(configuration, "refresh_api_key_hook", None)
    if hook is not None and not isinstance(hook, RecheckedHook):
        configuration.refresh_api_key_hook = RecheckedHook(hook, every)


def token_rejected(configuration: Any) -> None:
    """A 401: the next request runs the refresh hook (the token may have been rotated)."""
    hook = getattr(configuration, "refresh_api_key_hook", None)
    if isinstance(hook, RecheckedHook):
        hook.forget()
