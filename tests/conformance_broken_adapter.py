"""A client that breaks the conformance contract on purpose: after a 1008 it starts again with the
same token (as a naive reconnect loop would). tests/test_conformance.py checks that the runner
fails it: a suite that cannot fail a misbehaving client is worthless."""

from __future__ import annotations

import asyncio

from clients.conformance.python_adapter import Message, PythonAdapter


class IgnoresRefusal(PythonAdapter):
    def forward(self, msg: Message) -> None:
        super().forward(msg)
        if msg.get("type") == "status" and msg["status"] == "refused" and self.client is not None:
            # after the listeners ran: start() from inside the loop task that is about to return
            asyncio.get_running_loop().call_soon(self.client.start)


if __name__ == "__main__":
    asyncio.run(IgnoresRefusal().serve())
