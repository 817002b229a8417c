"""Smoke test of the Python SDK `apache-iggy` 0.9.0 against eddy (issue 39).

Usage: python smoke.py HOST:PORT. Prints one line per step and a closing
`N passed, N failed` line; exits non-zero if a step failed. Run by
`tests/tests/sdk_compat.rs` in a virtual environment outside the repository.
"""

import asyncio
import os
import sys

from apache_iggy import (
    Consumer,
    Durability,
    IggyClient,
    Partitioning,
    PollingStrategy,
    SendMessage,
)


async def main(addr):
    client = IggyClient(addr)
    results = []

    async def step(name, action):
        try:
            await action()
            results.append(True)
            print(f"ok {name}")
        except Exception as error:  # every failure is reported, then counted
            results.append(False)
            print(f"FAIL {name}: {error!r}")

    async def connect_login_ping():
        await client.connect()
        await client.login_user("iggy", "iggy")
        await client.ping()

    async def stats():
        stats = await client.get_stats()
        assert stats.process_id > 0, stats.process_id

    async def streams():
        await client.create_stream("py-stream")
        stream = await client.get_stream("py-stream")
        assert stream is not None and stream.name == "py-stream", stream

    async def create_topic_defaults():
        # Every optional argument left to the server (issue 39: refused with 4041 before).
        await client.create_topic("py-stream", "defaults", 2)
        topic = await client.get_topic("py-stream", "defaults")
        assert topic is not None and topic.partitions_count == 2, topic

    async def create_topic_durability():
        await client.create_topic(
            "py-stream",
            "replicated",
            1,
            durability=Durability.REPLICATED,
            consumer_offset_durability=Durability.PERSISTED,
        )
        topic = await client.get_topic("py-stream", "replicated")
        assert topic is not None, topic

    async def send_and_poll():
        sent = await client.send_messages(
            "py-stream",
            "defaults",
            Partitioning.partition_id(0),
            [SendMessage(f"py-{i}") for i in range(5)],
        )
        offsets = [c.base_offset for c in sent.confirmations]
        assert offsets in ([], [0]), offsets
        polled = await client.poll_messages(
            "py-stream",
            "defaults",
            consumer=Consumer.Single("py-reader"),
            polling_strategy=PollingStrategy.Offset(0),
            count=10,
            auto_commit=False,
            partition_id=0,
        )
        payloads = [m.payload().decode() for m in polled]
        assert payloads == [f"py-{i}" for i in range(5)], payloads

    async def consumer_group():
        await client.create_consumer_group("py-stream", "defaults", "py-group")
        await client.join_consumer_group("py-stream", "defaults", "py-group")
        group = await client.get_consumer_group("py-stream", "defaults", "py-group")
        assert group is not None and group.members_count == 1, group

    async def describe_options():
        options = await client.describe_options("topic")
        keys = {o.key for o in options}
        assert {"durability", "consumer_offset_durability"} <= keys, keys

    for name, action in [
        ("connect_login_ping", connect_login_ping),
        ("stats", stats),
        ("streams", streams),
        ("create_topic_defaults", create_topic_defaults),
        ("create_topic_durability", create_topic_durability),
        ("send_and_poll", send_and_poll),
        ("consumer_group", consumer_group),
        ("describe_options", describe_options),
    ]:
        await step(name, action)
    passed = sum(results)
    print(f"python: {passed} passed, {len(results) - passed} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    code = asyncio.run(main(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    # Exit without the interpreter's teardown: the binding's native runtime has been seen to
    # die while its objects are finalized after every scenario passed, which would turn a
    # passing run into a failed exit status.
    os._exit(code)
