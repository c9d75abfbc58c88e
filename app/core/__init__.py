"""Pure scheduling core: domain model, cluster cache and policies.

Nothing in this package may import fastapi, starlette, kubernetes, httpx, uvicorn or
prometheus_client (``tests/core/test_layering.py`` enforces it). Every decision is a function of
a cache snapshot, so every policy can be tested as a scenario table.
"""
