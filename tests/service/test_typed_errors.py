"""The service finds the event or parameter at fault from core's typed errors
(:mod:`core.errors`), never from their wording."""

from __future__ import annotations

import pytest

import service.ingest.fields
import service.models
from core.errors import InvalidFeatures, InvalidParameter
from service.errors import InvalidInput
from service.ingest import FeatureSpec, parse_events
from service.schemas import ModelCreate


def test_a_features_error_names_the_event_of_its_row(monkeypatch):
    def refuse(X, n_features=None, *, accept_sparse=True):
        raise InvalidFeatures("no such wording anywhere", row=1)

    monkeypatch.setattr(service.ingest.fields, "as_features", refuse)
    x = b'{"indices": [0], "values": [1.0]}'
    body = b'{"events": [{"x": %s, "id": "a"}, {"x": %s, "id": "b"}]}' % (x, x)
    with pytest.raises(InvalidInput) as caught:
        parse_events(body, "application/json", FeatureSpec(2, "sparse"), labelled=False,
                     max_events=10)  # fmt: skip
    error = caught.value
    assert (error.event, error.event_id, error.field) == (1, "b", "x")


def test_a_features_error_without_a_row_names_only_the_field(monkeypatch):
    def refuse(X, n_features=None, *, accept_sparse=True):
        raise ValueError("row 1 is mentioned but not carried")

    monkeypatch.setattr(service.ingest.fields, "as_features", refuse)
    with pytest.raises(InvalidInput) as caught:
        parse_events(b'{"events": [{"x": {"indices": [0], "values": [1.0]}}]}',
                     "application/json", FeatureSpec(2, "sparse"), labelled=False,
                     max_events=10)  # fmt: skip
    assert caught.value.event is None and caught.value.field == "x"


@pytest.mark.parametrize(
    ("raised", "field"),
    [
        (InvalidParameter("out of range", param="eta0"), "params.eta0"),
        (ValueError("eta0 must be > 0"), "params"),  # no .param: the message is not read
    ],
)
def test_a_learner_error_names_its_parameter(monkeypatch, raised, field):
    def refuse(name, **params):
        raise raised

    monkeypatch.setattr(service.models, "make_learner", refuse)
    with pytest.raises(InvalidInput) as caught:
        service.models.build_learner(ModelCreate(id="m", n_features=3, params={"eta0": 1.0}))
    assert caught.value.field == field
