"""A Destination mirrors a private topic with its subscriber token: the token opens the
topic's documents and its push channel on the hub, and never leaves for the servers the
resources live on."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rspush.hub.settings import Settings, Subscriber, Topic
from rspush.subscriber.agent import AgentConfig
from tests.support.agents import converged, running_agent
from tests.support.origin import publish, running_origin
from tests.support.push import custom_hub
from tests.support.waiting import eventually

TOKEN = "subscriber-token-of-mirror-1"


def private(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "topics": [Topic(name="dataset1", private=True)],
            "subscribers": [
                Subscriber(
                    name="mirror-1",
                    token_sha256=hashlib.sha256(TOKEN.encode()).hexdigest(),
                    topics=["dataset1"],
                )
            ],
        }
    )


async def test_a_private_topic_is_mirrored_with_the_token_kept_from_the_origin(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    async with custom_hub(redis_url, prefix, private) as (hub, http), running_origin() as origin:
        await publish(http, "dataset1", origin, [("/a.txt", "created", b"alpha")])
        config = AgentConfig(
            source_url=hub.url,
            dest=dest,
            topic="dataset1",
            token=TOKEN,
            maps=[(origin.url + "/", "")],
            poll_interval=0.1,
            backoff_initial=0.1,
            backoff_max=0.5,
        )
        async with running_agent(config) as run:
            await converged(origin, dest)
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            await publish(http, "dataset1", origin, [("/b.txt", "created", b"bravo")])
            await converged(origin, dest)
        assert [e["channel"] for e in run.applied()] == ["baseline", "push"]
        assert origin.authorizations == []
