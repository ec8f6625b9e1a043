from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


async def test_smoke(stack, scripted):
    scripted.reply("Hi there.")
    async with stack.client() as c:
        r = await c.post("/api/v1/sessions", json={"agent": "helper", "message": "hello", "create": True})
        print(r.status_code, r.text)
        r = await c.get("/api/v1/sessions")
        print(r.status_code, r.text)
        r = await c.get("/api/v1/health")
        print(r.status_code, r.text[:300])
        r = await c.get("/metrics")
        print(r.status_code, r.text[:100])
        r = await c.get("/readyz")
        print(r.status_code, r.text[:300])
