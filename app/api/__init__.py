"""HTTP layer: FastAPI routers that translate wire JSON and delegate to ``app.core``."""
