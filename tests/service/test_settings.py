"""Settings are read from AUCSTREAM_* and refused at start-up when invalid."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.app import create_app
from service.settings import Settings


def test_environment_is_read(monkeypatch):
    monkeypatch.setenv("AUCSTREAM_REDIS_URL", "redis://127.0.0.1:6390/1")
    monkeypatch.setenv("AUCSTREAM_API_KEYS", "a, b")
    monkeypatch.setenv("AUCSTREAM_MAX_BODY_BYTES", "2048")
    settings = Settings()
    assert settings.store == "redis"  # a Redis URL selects the Redis store
    assert settings.api_keys == ["a", "b"] and settings.max_body_bytes == 2048
    monkeypatch.setenv("AUCSTREAM_REDIS_URL", "redis+cluster://127.0.0.1:7001")
    monkeypatch.setenv("AUCSTREAM_MAX_REMEMBERED_IDS", "5000")
    settings = Settings()  # a Redis Cluster: the Redis store too
    assert settings.store == "redis" and settings.max_remembered_ids == 5000


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("AUCSTREAM_STORE", "redis", "needs AUCSTREAM_REDIS_URL"),
        ("AUCSTREAM_STORE", "postgres", "store"),
        ("AUCSTREAM_REDIS_URL", "http://x", "must start with redis://"),
        ("AUCSTREAM_REDIS_URL", "redis+sentinel://x", "redis\\+cluster://"),
        ("AUCSTREAM_MAX_REMEMBERED_IDS", "0", "max_remembered_ids"),
        ("AUCSTREAM_MAX_BODY_BYTES", "-1", "max_body_bytes"),
        ("AUCSTREAM_EVENT_ID_TTL_SECONDS", "0", "event_id_ttl_seconds"),
        # the default store is SQLite (several workers may share it), which queue mode refuses
        ("AUCSTREAM_MODE", "queue", "needs the Redis store, not the sqlite store"),
    ],
)
def test_invalid_settings_fail_at_start_up(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=message):
        create_app()


def test_learners_list_needs_a_key_when_keys_are_set(make_client):
    client = make_client(api_keys=["k"])
    assert client.get("/v1/learners").status_code == 401
    listed = client.get("/v1/learners", headers={"x-api-key": "k"}).json()["learners"]
    assert "spam" in listed and "svm_pauc" not in listed
