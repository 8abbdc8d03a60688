"""Many Lua script calls in one round trip: EVALSHA each, no SCRIPT EXISTS first.

Owns sending a batch of registered scripts (redis-py `Script`s) down one non-transactional pipeline.
redis-py's own pipeline asks Redis `SCRIPT EXISTS` for every script before each `execute()`: one more
round trip per batch, and on a loaded machine each round trip is a wake-up of Redis and of the caller
(the API's group commit of submits, the control loop's reserve and save batches). Here the calls go as
EVALSHA straight away; the ones Redis answers NOSCRIPT (its script cache is empty after a restart, a
failover to a replica, `SCRIPT FLUSH`) executed nothing, so their scripts are loaded and just those
calls sent again.

ScriptBatch(client)        `call(script, keys, args)` queues one call; `execute(raise_on_error=True)` sends
                           them and answers per call in order, as `Pipeline.execute` does: the first
                           error raised, or (raise_on_error=False) each error in its call's place.
call_in_chunks(client, script, head, items, chunk)
                           one script over many items (cluster names) in one round trip, `chunk` items
                           per call after the `head` arguments, so that no call blocks Redis long; the
                           replies (lists) joined in order
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

__all__ = ["ScriptBatch", "call_in_chunks"]


class ScriptBatch:
    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._calls: list[tuple[Script, Sequence[Any], Sequence[Any]]] = []

    def call(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> None:
        """Queue one call of `script` (registered on any client of the same Redis)."""
        self._calls.append((script, keys, args))

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send every queued call in one round trip (two when Redis lacked a script); the answers in
        order. RedisError for a connection failure, as redis-py raises it."""
        calls, self._calls = self._calls, []
        answers = self._send(calls)
        missing = [i for i, a in enumerate(answers) if isinstance(a, NoScriptError)]
        if missing:
            for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
                script.sha = self._client.script_load(script.script)
            for i, answer in zip(missing, self._send([calls[i] for i in missing]), strict=True):
                answers[i] = answer
        if raise_on_error:
            for answer in answers:
                if isinstance(answer, redis.ResponseError):
                    raise answer
        return answers

    def _send(self, calls: Sequence[tuple[Script, Sequence[Any], Sequence[Any]]]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for script, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        return list(pipe.execute(raise_on_error=False))


def call_in_chunks(
    client: redis.Redis, script: Script, head: Sequence[Any], items: Sequence[Any], chunk: int
) -> list[Any]:
    """Call `script` with ARGV = head + up to `chunk` items, for every chunk of `items`, in one round
    trip; the calls' replies (each a list) joined in order."""
    batch = ScriptBatch(client)
    for i in range(0, len(items), chunk):
        batch.call(script, [], [*head, *items[i : i + chunk]])
    return [value for reply in batch.execute() for value in reply]
