"""The hub's exceptions: one root, a stable code per failure, no HTTP.

::

    HubError                      code, message, violations (empty but for IngestError)
    ├── AuthError                 topic
    │   ├── Unauthenticated       unauthenticated
    │   └── Forbidden             forbidden (+ source)
    ├── NotFound                  not-found, unknown-topic (+ topic)
    ├── IngestError               a request that writes nothing (+ violations, entry, rule)
    │   ├── RequestError          body-too-large, body-timeout, body-incomplete,
    │   │                         server-busy, bad-idempotency-key, content-type,
    │   │                         link-header
    │   ├── DocumentRejected      unsafe-xml, document-too-large, malformed-xml,
    │   │                         wrong-namespace, not-resourcesync, invalid-document,
    │   │                         wrong-capability, empty, too-many-entries,
    │   │                         entry-too-large, future-change-time, forward-order
    │   ├── ChangeTimeBackwards   change-time-backwards (+ topic, first_us, last_us)
    │   ├── ConflictingChange     conflicting-change (+ topic, entry)
    │   ├── TopicHasHistory       topic-has-history (+ topic)
    │   └── IdempotencyKeyReused  idempotency-key-reused
    ├── SubscriptionRejected      bad-subscription (a WebSub form the hub refuses at once;
    │                             rspush.hub.websub.subscriptions)
    └── StoreUnavailable          store-unavailable (a fixed message: no internals)

The code (:class:`Code`) is what clients see in the ``error`` member of a JSON error body and
what the rejection metrics count; the HTTP edge (:mod:`.app`) maps each code to a status in
one table. Raisers never choose a status.

The hub's other exceptions are never answered to a client: each is caught by the one part
that expects it, or ends ``rs-hub serve`` with the exit status :mod:`.cli` gives it::

    EmbeddedServerError          the embedded server failed (.embedded): exit 1
    └── DataDirBusyError         another hub holds the data dir: exit 2
    ListenError                  a port cannot be bound (.server): exit 2
    WorkerDied                   worker processes kept dying (.workers): exit 1
    StaleCheckpoint              a bridge's checkpoint moved under it (.store): the step
                                 wrote nothing and is dropped (.bridges.runner)
    BridgeError                  a bridge's remote cannot answer now (.bridges.base): the
    └── RemoteRegression         runner backs off; a regression is counted, not fatal
    OaiParseError                an OAI-PMH answer that does not parse (.bridges.oai_parse):
                                 raised again as a BridgeError
    BadSubscription              a WebSub form that is no subscription request
                                 (.websub.form): raised again as SubscriptionRejected
    CallbackRefused              a WebSub callback the address policy refuses
                                 (.websub.callbacks): a failed verification or delivery
    Stalled                      a push client's send buffer stayed full (.push.flow): a
                                 slow-consumer close
    HeadTooLarge                 an HTTP request's head over its limit (.connections): a
                                 431 written by the protocol, the connection closed
"""

from __future__ import annotations

from enum import StrEnum

from rspush.resourcesync import Violation


class Code(StrEnum):
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not-found"
    UNKNOWN_TOPIC = "unknown-topic"
    BODY_TOO_LARGE = "body-too-large"
    BODY_TIMEOUT = "body-timeout"
    BODY_INCOMPLETE = "body-incomplete"
    SERVER_BUSY = "server-busy"
    BAD_IDEMPOTENCY_KEY = "bad-idempotency-key"
    CONTENT_TYPE = "content-type"
    LINK_HEADER = "link-header"
    UNSAFE_XML = "unsafe-xml"
    DOCUMENT_TOO_LARGE = "document-too-large"
    MALFORMED_XML = "malformed-xml"
    WRONG_NAMESPACE = "wrong-namespace"
    NOT_RESOURCESYNC = "not-resourcesync"
    INVALID_DOCUMENT = "invalid-document"
    WRONG_CAPABILITY = "wrong-capability"
    EMPTY = "empty"
    TOO_MANY_ENTRIES = "too-many-entries"
    ENTRY_TOO_LARGE = "entry-too-large"
    FUTURE_CHANGE_TIME = "future-change-time"
    FORWARD_ORDER = "forward-order"
    CHANGE_TIME_BACKWARDS = "change-time-backwards"
    CONFLICTING_CHANGE = "conflicting-change"
    TOPIC_HAS_HISTORY = "topic-has-history"
    IDEMPOTENCY_KEY_REUSED = "idempotency-key-reused"
    STORE_UNAVAILABLE = "store-unavailable"
    BAD_SUBSCRIPTION = "bad-subscription"


class HubError(Exception):
    """Root of every error the hub reports to a client."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.violations: list[Violation] = []

    def as_json(self) -> dict[str, object]:
        """The JSON error body of a post: ``{"error", "message", "violations"}``."""
        return {
            "error": self.code,
            "message": self.message,
            "violations": [v.model_dump(mode="json") for v in self.violations],
        }


class AuthError(HubError):
    """The request's Source is unknown or may not post to ``topic``."""

    def __init__(self, code: Code, message: str, *, topic: str | None = None) -> None:
        super().__init__(code, message)
        self.topic = topic


class Unauthenticated(AuthError):
    def __init__(self, message: str) -> None:
        super().__init__(Code.UNAUTHENTICATED, message)


class Forbidden(AuthError):
    def __init__(self, message: str, *, topic: str, source: str) -> None:
        super().__init__(Code.FORBIDDEN, message, topic=topic)
        self.source = source


class NotFound(HubError):
    """No such topic or document. ``unknown-topic`` when a post names a topic this hub does
    not have, ``not-found`` for a document that does not exist."""

    def __init__(
        self, message: str, *, topic: str | None = None, code: Code = Code.NOT_FOUND
    ) -> None:
        super().__init__(code, message)
        self.topic = topic


class IngestError(HubError):
    """A post that writes nothing. ``violations`` are the spec rules the document broke;
    ``entry`` (index in the document) and ``rule`` locate the first problem when known."""

    def __init__(
        self,
        code: Code,
        message: str,
        violations: list[Violation] | None = None,
        *,
        entry: int | None = None,
        rule: str | None = None,
    ) -> None:
        super().__init__(code, message)
        self.violations = violations or []
        self.entry = entry
        self.rule = rule


class RequestError(IngestError):
    """The request around the document is wrong: its size, headers or media type."""


class DocumentRejected(IngestError):
    """The posted document does not parse, breaks a rule or a limit, or has bad times."""


class ChangeTimeBackwards(IngestError):
    """The first change is earlier than the topic's last accepted change (checked inside the
    atomic append, so concurrent posters cannot interleave out of order)."""

    def __init__(self, message: str, *, topic: str, first_us: int, last_us: int) -> None:
        super().__init__(Code.CHANGE_TIME_BACKWARDS, message)
        self.topic = topic
        self.first_us = first_us
        self.last_us = last_us


class ConflictingChange(IngestError):
    """A change has the same URI and change time as the change the topic holds for that URI,
    but another change type or other content: two histories of one resource disagree."""

    def __init__(self, message: str, *, topic: str, entry: int) -> None:
        super().__init__(Code.CONFLICTING_CHANGE, message, entry=entry)
        self.topic = topic


class TopicHasHistory(IngestError):
    """A baseline posted to a topic that already has state or changes. Replacing its state
    silently would leave every follower (push and Change List alike) holding resources the
    new state lacks, with no ``deleted`` change to tell them: a baseline only seeds."""

    def __init__(self, topic: str) -> None:
        super().__init__(
            Code.TOPIC_HAS_HISTORY,
            "a baseline only seeds a topic without history; this topic already has state or "
            "changes: post the differences as changes (deletions included) instead",
        )
        self.topic = topic


class IdempotencyKeyReused(IngestError):
    """The Source already used this ``Idempotency-Key`` on this topic for another body
    (draft-ietf-httpapi-idempotency-key-header §2.7: a key names one request payload)."""

    def __init__(self) -> None:
        super().__init__(
            Code.IDEMPOTENCY_KEY_REUSED,
            "this Idempotency-Key was already used for a different body; use a new key",
        )


STORE_UNAVAILABLE_MESSAGE = "the store is unavailable; retry later"


class StoreUnavailable(HubError):
    """Redis did not answer or refused the operation; nothing is known to be written.

    The message clients see is fixed: Redis's own error text names sockets, hosts and server
    versions, so it goes to the log only (:mod:`.store`)."""

    def __init__(self, message: str = STORE_UNAVAILABLE_MESSAGE) -> None:
        super().__init__(Code.STORE_UNAVAILABLE, message)
