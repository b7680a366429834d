"""``aucstream store``: the alarms of lost data of the Redis or SQLite store, and their
acknowledgement by an operator (the same as ``POST /v1/store/acknowledge-loss``)."""

from __future__ import annotations

import argparse

from service.cli import add_command, load_settings
from service.cli._errors import CliError

DESCRIPTION = """\
When the service notices that the store lost data (Redis restarted without persistence or
from an older dump, an SQLite file replaced by an older copy), the store or the models
concerned answer 503 and /readyz fails until an operator acknowledges the loss: find out
what was lost first (restore a backup, re-send the events).

examples:
  aucstream store alarms --redis-url redis://127.0.0.1:6379/0
  aucstream store acknowledge-loss --redis-url redis://127.0.0.1:6379/0
  aucstream store acknowledge-loss --data-dir /var/lib/aucstream"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "store", "show or acknowledge losses of data in the store", DESCRIPTION
    )
    parser.add_argument("action", choices=("alarms", "acknowledge-loss"))
    parser.add_argument("--redis-url", help="default: AUCSTREAM_REDIS_URL")
    parser.add_argument("--data-dir", help="the SQLite store's (default: AUCSTREAM_DATA_DIR)")
    parser.set_defaults(handler=store)


def store(args: argparse.Namespace) -> int:
    from service.errors import ServiceError
    from service.stores.client import connect
    from service.stores.redis import RedisStore
    from service.stores.sqlite import SQLiteStore
    from service.stores.sqlite_file import StoreOpenError

    settings = load_settings(
        {"AUCSTREAM_REDIS_URL": args.redis_url, "AUCSTREAM_DATA_DIR": args.data_dir}
    )
    try:
        if settings.store == "redis":
            assert settings.redis_url is not None
            store: RedisStore | SQLiteStore = RedisStore(connect(settings.redis_url))
        elif settings.store == "sqlite":
            store = SQLiteStore.open(settings.data_dir, settings.sqlite_synchronous)
        else:
            raise CliError("the memory store keeps nothing to lose: nothing to check")
        try:
            alarms = store.alarms() if args.action == "alarms" else store.acknowledge_loss()
        finally:
            store.close()
    except (ServiceError, StoreOpenError) as error:
        raise CliError(getattr(error, "detail", str(error))) from None
    if not alarms:
        print("no loss of data noticed")
        return 0
    verb = "acknowledged" if args.action == "acknowledge-loss" else "not acknowledged"
    for scope, cause in sorted(alarms.items()):
        print(f"{scope}: {cause} ({verb})")
    return 0
