"""aucstream service: HTTP API, stores (SQLite, memory, Redis), ingest parsing, engine, CLI.

Every route, with the API's decisions (default scaling, status codes, event ids, delayed
labels, regret, queue mode, stores), is listed in docs/api.md; docs/architecture.md §4
gives the service's contracts.
"""
