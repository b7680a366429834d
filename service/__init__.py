"""aucstream service: HTTP API, stores, ingest, engine, CLI (docs/api.md, docs/architecture.md)."""
