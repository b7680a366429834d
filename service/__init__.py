"""aucstream service: HTTP API, stores (memory, Redis), ingest parsing, engine, CLI."""
