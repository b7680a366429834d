"""The WebSocket stream of a model (``/v1/models/{id}/stream``, docs/stream.md): frames decoded
into messages by :mod:`.protocol` (binary frames of one layout into blocks by :mod:`.blocks`),
applied by :mod:`.session`, answered by :mod:`.replies`, served by the route in :mod:`.endpoint`.
"""
