"""The WebSocket stream of a model (``/v1/models/{id}/stream``, docs/stream.md).

==================== ======================================================================
:mod:`.protocol`     frames -> messages (JSON and the binary form), the binary encoder
:mod:`.blocks`       binary frames of one layout -> one array of their messages (a block)
:mod:`.session`      a batch of messages -> one engine call per run, a reply per message
:mod:`.replies`      every reply as JSON text, by one builder
:mod:`.endpoint`     the route: the key on connect, the bounded receive queue, the batches
==================== ======================================================================
"""
