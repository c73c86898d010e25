"""Test steps, loaded by the end-to-end tests through ``<Modules><Library>`` as a third party's plugin would be
(so they depend on none of the built-in steps)."""

from __future__ import annotations

from collections.abc import Mapping

import trio

from broker import hookimpl
from broker.actions import RunContext, Step


class _Step(Step):
    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # read per run from ctx.options


class WriteLine(_Step):
    """``test-write-line``: appends ``Line`` to ``File``."""

    async def run(self, ctx: RunContext) -> str:
        def write() -> None:
            with open(ctx.options["File"], "a") as f:
                f.write(ctx.options["Line"] + "\n")

        await trio.to_thread.run_sync(write)
        return "wrote " + ctx.options["Line"]


class DeleteSow(_Step):
    """``test-delete-sow``: deletes ``Filter`` from ``Topic`` through the host."""

    async def run(self, ctx: RunContext) -> str:
        deleted = await ctx.host.delete_sow(ctx.options["Topic"], None, ctx.options["Filter"])
        return f"deleted {deleted!r}"


class Stop(_Step):
    """``test-stop``: asks the broker to stop, giving ``Reason``."""

    async def run(self, ctx: RunContext) -> str:
        ctx.host.request_shutdown(ctx.options["Reason"])
        return "asked to stop"


class Explode(_Step):
    """``test-explode``: a plugin bug."""

    async def run(self, ctx: RunContext) -> str:
        raise RuntimeError("the disk caught fire")


class Nap(_Step):
    """``test-nap``: sleeps ``Seconds``."""

    async def run(self, ctx: RunContext) -> str:
        await trio.sleep(float(ctx.options["Seconds"]))
        return "slept " + ctx.options["Seconds"] + "s"


@hookimpl
def broker_register_actions(registry) -> None:  # noqa: ANN001 - broker.plugins.Registry
    """Register the test steps."""
    for name, step in (("test-write-line", WriteLine), ("test-delete-sow", DeleteSow), ("test-stop", Stop),
                       ("test-explode", Explode), ("test-nap", Nap)):
        registry.add(name, step)
