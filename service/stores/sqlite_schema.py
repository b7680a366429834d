"""The SQLite store's schema: the tables of a new file (described in
:mod:`service.stores.sqlite_file`), its version, and the in-place upgrades from older ones."""

#: ``PRAGMA user_version`` of the layout below and of the state's chunk size
#: (:data:`service.stores.fields.CHUNK_BYTES`; 1: 16 KiB chunks; 2: no log, and 3: the log
#: in a ``WITHOUT ROWID`` table and the ids' counts in a table of their own, both upgraded in
#: place); a file with another one is refused
SCHEMA_VERSION = 4


def _model_table(
    name: str, columns: str, key: str, *, if_not_exists: bool = True, without_rowid: bool = False
) -> str:
    """The statement that creates a table of rows that belong to one model: ``model_id`` then
    ``columns`` (``"name TYPE, ..."``, every one ``NOT NULL``), keyed by ``(model_id, key)``.
    One function, so that the upgrades create the very tables a new file has."""
    declared = ", ".join(f"{column} NOT NULL" for column in ("model_id TEXT", *columns.split(", ")))
    create = "CREATE TABLE IF NOT EXISTS" if if_not_exists else "CREATE TABLE"
    options = " WITHOUT ROWID" if without_rowid else ""
    return f"{create} {name} (\n    {declared},\n    PRIMARY KEY (model_id, {key})){options}"


#: the log's table: one row per appended entry
_LOG = ("log", "version INTEGER, entry BLOB", "version")
#: the ids learned (kind 0) and expired (kind 1), each until its expiry
_IDS = ("ids", "kind INTEGER, event_id TEXT, expiry REAL", "kind, event_id")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS models (
    id TEXT PRIMARY KEY, config TEXT NOT NULL, version INTEGER NOT NULL,
    incarnation TEXT NOT NULL, pending INTEGER NOT NULL DEFAULT 0,
    saved INTEGER NOT NULL DEFAULT 0, seen_ids INTEGER NOT NULL DEFAULT 0,
    expired_ids INTEGER NOT NULL DEFAULT 0);
{_model_table(*_LOG)};
{_model_table("meta", "name TEXT, value TEXT", "name")};
{_model_table("state", "field TEXT, data BLOB", "field")};
{_model_table("layouts", "name TEXT, layout TEXT", "name")};
{_model_table(*_IDS, without_rowid=True)};
CREATE INDEX IF NOT EXISTS ids_by_expiry ON ids (model_id, kind, expiry);
{_model_table("pending", "event_id TEXT, record BLOB, deadline REAL", "event_id")};
CREATE INDEX IF NOT EXISTS pending_by_deadline ON pending (model_id, deadline);
"""
#: the tables whose rows belong to one model (besides its row of ``models``)
MODEL_TABLES = ("log", "meta", "state", "layouts", "ids", "pending")
#: schema 2 to 3: the log, and the version each state is the checkpoint of (every state of a
#: schema 2 file is its model's current version)
UPGRADE_2 = f"""
ALTER TABLE models ADD COLUMN saved INTEGER NOT NULL DEFAULT 0;
UPDATE models SET saved = version;
{_model_table(*_LOG, if_not_exists=False, without_rowid=True)}
"""
#: schema 3 to 4: fewer pages written per appended entry (a one-event commit wrote ~9.4 WAL
#: frames; figures in loadtest/README.md, "One sender on SQLite"): the ids' counts move into
#: the model's row, which the commit writes anyway, and the log into a rowid table
UPGRADE_3 = f"""
ALTER TABLE models ADD COLUMN seen_ids INTEGER NOT NULL DEFAULT 0;
ALTER TABLE models ADD COLUMN expired_ids INTEGER NOT NULL DEFAULT 0;
UPDATE models SET
    seen_ids = coalesce(
        (SELECT n FROM id_counts WHERE model_id = models.id AND kind = 0), 0),
    expired_ids = coalesce(
        (SELECT n FROM id_counts WHERE model_id = models.id AND kind = 1), 0);
DROP TABLE id_counts;
ALTER TABLE log RENAME TO log_3;
{_model_table(*_LOG, if_not_exists=False)};
INSERT INTO log SELECT model_id, version, entry FROM log_3 ORDER BY model_id, version;
DROP TABLE log_3
"""
#: the processes' write turns (:mod:`service.stores.sqlite_turns`): created at every open, so
#: that a file of schema 4 written before it has it (transient rows: no new schema version)
TURNS = (
    "CREATE TABLE IF NOT EXISTS turns (model_id TEXT PRIMARY KEY, holder TEXT NOT NULL, "
    "until REAL NOT NULL)"
)
