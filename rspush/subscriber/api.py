"""Embedding the agent: an async iterator of verified changes, with any applier.

>>> config = AgentConfig(source_url="https://hub.example.org", dest=Path("mirror"))
>>> async with Subscription(config, applier=MyIndexer()) as outcomes:
...     async for outcome in outcomes:          # Outcome(change, event, at, reason)
...         print(outcome.event, outcome.change.uri, outcome.change.channel)

The applier is anything with ``async apply(change, relative_path, content_file)``
(:class:`rspush.subscriber.appliers.Applier`): the file system by default, a search index, a
queue… It gets each change after filtering, ordering and verification; the iterator yields
it once the applier returned and the checkpoint is committed. Leaving the ``async with``
block stops the agent cleanly (changes in flight get a second to finish, the checkpoint is
committed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType

from .agent import Agent
from .appliers import Applier
from .changes import Outcome
from .config import AgentConfig

_END = object()


class Subscription:
    def __init__(self, config: AgentConfig, *, applier: Applier | None = None) -> None:
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self.agent = Agent(config, applier=applier, on_outcome=self._queue.put_nowait)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncIterator[Outcome]:
        self._task = asyncio.create_task(self._run(), name="rs-subscribe")
        return self._outcomes()

    async def _run(self) -> None:
        try:
            await self.agent.run()
        finally:
            self._queue.put_nowait(_END)

    async def _outcomes(self) -> AsyncIterator[Outcome]:
        while (item := await self._queue.get()) is not _END:
            assert isinstance(item, Outcome)
            yield item
        # The agent ended by itself: surface its error (discovery failure, refusal…).
        assert self._task is not None
        self._task.result()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.agent.stop()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
