import asyncio

import pytest

from agentic_rag.channel_layers import RedisChannelLayer


class PoppedAfterCancellation(Exception):
    pass


class SwallowingConnection:
    """A Redis connection whose blocking pop, cancelled, answers "timed out" as redis-py can."""

    def __init__(self) -> None:
        self.pops = 0
        self.swallowed = False

    async def eval(self, *args) -> None:
        return None

    async def bzpopmin(self, channel: str, timeout: float):
        if self.swallowed:
            # The real layer would block here again, for ever; end the test instead.
            raise PoppedAfterCancellation
        self.pops += 1
        try:
            await asyncio.sleep(timeout)
        except asyncio.CancelledError:
            self.swallowed = True
            return None  # the cancellation is lost here
        return None


@pytest.mark.asyncio
async def test_a_receive_ends_when_cancelled_even_if_redis_py_swallows_the_cancellation():
    layer = RedisChannelLayer(hosts=[{"address": "redis://127.0.0.1:1"}])
    connection = SwallowingConnection()
    layer.connection = lambda index: connection
    receiving = asyncio.create_task(layer.receive_single("specific.test!"))
    await asyncio.sleep(0.05)

    receiving.cancel()
    done, _ = await asyncio.wait({receiving}, timeout=2)

    assert receiving in done
    assert receiving.cancelled()  # not PoppedAfterCancellation: it did not pop again


@pytest.mark.asyncio
async def test_a_pop_that_times_out_uncancelled_is_tried_again():
    layer = RedisChannelLayer(hosts=[{"address": "redis://127.0.0.1:1"}])
    layer.brpop_timeout = 0.01
    connection = SwallowingConnection()
    layer.connection = lambda index: connection
    receiving = asyncio.create_task(layer.receive_single("specific.test!"))
    await asyncio.sleep(0.2)

    assert not receiving.done() and connection.pops > 3
    receiving.cancel()
    await asyncio.wait({receiving}, timeout=2)
    assert receiving.cancelled()
