"""``aucstream store``: the alarms of lost data of the Redis store, and their acknowledgement
by an operator (the same as ``POST /v1/store/acknowledge-loss``)."""

from __future__ import annotations

import argparse
import os

from service.cli import add_command
from service.cli._errors import CliError, validation_message

DESCRIPTION = """\
When the service notices that Redis lost data (restarted without persistence, or from an
older dump), the store or the models concerned answer 503 and /readyz fails until an operator
acknowledges the loss: find out what was lost first (restore a backup, re-send the events).

examples:
  aucstream store alarms --redis-url redis://127.0.0.1:6379/0
  aucstream store acknowledge-loss --redis-url redis://127.0.0.1:6379/0"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "store", "show or acknowledge losses of data in the Redis store", DESCRIPTION
    )
    parser.add_argument("action", choices=("alarms", "acknowledge-loss"))
    parser.add_argument("--redis-url", default=None, help="default: AUCSTREAM_REDIS_URL")
    parser.set_defaults(handler=store)


def store(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from service.errors import ServiceError
    from service.settings import Settings
    from service.stores.client import connect
    from service.stores.redis import RedisStore

    if args.redis_url is not None:
        os.environ["AUCSTREAM_REDIS_URL"] = args.redis_url
    try:
        settings = Settings()
    except ValidationError as error:
        raise CliError(f"invalid settings: {validation_message(error)}") from None
    if settings.redis_url is None:
        raise CliError("losses of data are tracked in Redis: set AUCSTREAM_REDIS_URL")
    try:
        redis_store = RedisStore(connect(settings.redis_url))
        try:
            if args.action == "alarms":
                alarms = redis_store.alarms()
            else:
                alarms = redis_store.acknowledge_loss()
        finally:
            redis_store.close()
    except ServiceError as error:
        raise CliError(error.detail) from None
    if not alarms:
        print("no loss of data noticed")
        return 0
    verb = "acknowledged" if args.action == "acknowledge-loss" else "not acknowledged"
    for scope, cause in sorted(alarms.items()):
        print(f"{scope}: {cause} ({verb})")
    return 0
