"""The Redis channel layer, with the cancellation that redis-py can lose given back."""

from __future__ import annotations

import asyncio
import logging
import time

from channels_redis.core import RedisChannelLayer as BaseRedisChannelLayer
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
RETRY_S = 1.0  # while Redis is unreachable, a consumer's receive tries again this often


class RedisChannelLayer(BaseRedisChannelLayer):
    """channels_redis's layer, whose receive always ends when its task is cancelled.

    A consumer waits on Redis in blocking pops. When its task is cancelled (the websocket
    closed) as redis-py reads the pop's reply, redis-py can answer as if the pop had timed out
    and swallow the cancellation; channels_redis then pops again, and again every
    `brpop_timeout`, for ever. Measured with a socket timeout of 15 s: 1 receive in 300,
    cancelled 0-200 ms after it began, still ran 13 s later, each one holding the process's
    receive lock and a Redis connection.
    """

    async def _brpop_with_clean(self, index, channel, timeout):
        member = await super()._brpop_with_clean(index, channel, timeout)
        task = asyncio.current_task()
        if member is None and task is not None and task.cancelling():
            raise asyncio.CancelledError("cancelled while Redis answered a blocking pop")
        return member

    _warned_at = 0.0

    async def receive(self, channel):
        """Wait for a message; while Redis is unreachable, try again instead of raising, which
        would close every socket of the process with 1011. A consumer that needs the layer
        (group_add at connect) refuses its socket itself."""
        while True:
            try:
                return await super().receive(channel)
            except (OSError, RedisError) as error:
                self._warn(error)
                await asyncio.sleep(RETRY_S)

    def _warn(self, error: Exception) -> None:
        now = time.monotonic()
        if now - RedisChannelLayer._warned_at >= 60:  # once a minute, not once a socket a second
            RedisChannelLayer._warned_at = now
            log.warning("the channel layer's Redis is unreachable; sockets wait for it: %s", error)
