"""Reading request bodies within limits: a size cap, a deadline and a process-wide budget.

- **Size**: a body over ``max_body_bytes`` is refused, on its declared ``Content-Length``
  before a byte is read, else as soon as the streamed bytes pass it.
- **Deadline**: the whole body must arrive within ``body_timeout_s`` of the first read; a
  client that declares more than it sends, or streams a chunked body without end, is answered
  ``body-timeout`` and nothing is written.
- **Budget** (:class:`BodyBudget`): the bytes of all bodies held at once, across requests,
  are bounded. A declared length is reserved up front, a chunked body chunk by chunk; past the
  budget the request is refused (``server-busy``, retry later) rather than queued, so memory
  stays bounded however many Sources post at once. What a request reserved is given back when
  it is answered: its parsed document and plan live until then, and grow with its body.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from .errors import Code, RequestError


class BodyBudget:
    """A byte count shared by every request of the process (one event loop: no lock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0
        """The most ever held at once (what tests and metrics compare with ``limit``)."""

    def take(self, size: int) -> bool:
        """Reserve ``size`` bytes, if the budget has them."""
        if self.held + size > self.limit:
            return False
        self.held += size
        self.peak = max(self.peak, self.held)
        return True

    def give_back(self, size: int) -> None:
        self.held -= size


class BodyReader:
    """One request's body, read once within the limits; :meth:`release` when answered."""

    def __init__(
        self,
        chunks: Callable[[], AsyncIterator[bytes]],
        declared_length: str | None,
        *,
        max_bytes: int,
        timeout_s: float,
        budget: BodyBudget,
        on_disconnect: type[BaseException],
    ) -> None:
        self._chunks = chunks
        self._declared = declared_length
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._budget = budget
        self._disconnect = on_disconnect
        self._reserved = 0

    async def __call__(self) -> bytes:
        limit = self._max_bytes
        declared = self._declared
        if declared is not None and declared.isdigit():
            if int(declared) > limit:
                raise RequestError(Code.BODY_TOO_LARGE, f"body is {declared} bytes; limit {limit}")
            self._reserve(int(declared))
        body = bytearray()
        try:
            async with asyncio.timeout(self._timeout_s):
                async for chunk in self._chunks():
                    body += chunk
                    if len(body) > limit:
                        raise RequestError(
                            Code.BODY_TOO_LARGE, f"body exceeds the limit of {limit}"
                        )
                    if len(body) > self._reserved:
                        self._reserve(len(body) - self._reserved)
        except TimeoutError:
            raise RequestError(
                Code.BODY_TIMEOUT,
                f"the body did not arrive within {self._timeout_s:g} s",
            ) from None
        except self._disconnect:
            raise RequestError(
                Code.BODY_INCOMPLETE, "the client closed the connection before the body ended"
            ) from None
        return bytes(body)

    def _reserve(self, size: int) -> None:
        if not self._budget.take(size):
            raise RequestError(
                Code.SERVER_BUSY,
                "too many request bodies in progress; retry shortly",
            )
        self._reserved += size

    def release(self) -> None:
        """Give back what this body reserved (idempotent)."""
        self._budget.give_back(self._reserved)
        self._reserved = 0
