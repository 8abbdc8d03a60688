"""The HTTP API (FastAPI): routes, wire schemas, following jobs (SSE), request limits, the dashboard."""
