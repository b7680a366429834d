"""The SQLite store's schema: the tables of a file (described in docs/architecture.md, "SQLite
tables") and its version."""

#: ``PRAGMA user_version`` of the layout below and of the state's chunk size
#: (:data:`service.stores.fields.CHUNK_BYTES`); a file of another one is refused (the product
#: is unreleased: an older file is exported model by model, never upgraded in place)
SCHEMA_VERSION = 6


def _model_table(name: str, columns: str, key: str, *, without_rowid: bool = False) -> str:
    """The statement that creates a table of rows that belong to one model: ``model_id`` then
    ``columns`` (``"name TYPE, ..."``, every one ``NOT NULL``), keyed by ``(model_id, key)``."""
    declared = ", ".join(f"{column} NOT NULL" for column in ("model_id TEXT", *columns.split(", ")))
    options = " WITHOUT ROWID" if without_rowid else ""
    return (
        f"CREATE TABLE IF NOT EXISTS {name} (\n    {declared},\n"
        f"    PRIMARY KEY (model_id, {key})){options}"
    )


#: the ids learned (kind 0) and expired (kind 1), each until its expiry
_IDS = ("ids", "kind INTEGER, event_id TEXT, expiry REAL", "kind, event_id")
#: every statement is idempotent: the schema is run at each open of a file of this version,
#: which so gains the tables added without a new version (transient or created empty: the
#: processes' write turns, the lost-data checks' epoch marker and alarms)
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS models (
    id TEXT PRIMARY KEY, version INTEGER NOT NULL,
    incarnation TEXT NOT NULL, pending INTEGER NOT NULL DEFAULT 0,
    saved INTEGER NOT NULL DEFAULT 0, seen_ids INTEGER NOT NULL DEFAULT 0,
    expired_ids INTEGER NOT NULL DEFAULT 0,
    last_entry INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS configs (model_id TEXT PRIMARY KEY, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS log (
    seq INTEGER PRIMARY KEY, model_id TEXT NOT NULL, version INTEGER NOT NULL,
    previous INTEGER NOT NULL, entry BLOB NOT NULL);
{_model_table("meta", "name TEXT, value TEXT", "name")};
{_model_table("state", "field TEXT, data BLOB", "field")};
{_model_table("layouts", "name TEXT, layout TEXT", "name")};
{_model_table(*_IDS, without_rowid=True)};
CREATE INDEX IF NOT EXISTS ids_by_expiry ON ids (model_id, kind, expiry);
{_model_table("pending", "event_id TEXT, record BLOB, deadline REAL", "event_id")};
CREATE INDEX IF NOT EXISTS pending_by_deadline ON pending (model_id, deadline);
CREATE TABLE IF NOT EXISTS turns (
    model_id TEXT PRIMARY KEY, holder TEXT NOT NULL, until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS epoch_marker (
    id INTEGER PRIMARY KEY CHECK (id = 1), epoch TEXT NOT NULL, clock INTEGER NOT NULL,
    acknowledged INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS loss_alarms (scope TEXT PRIMARY KEY, cause TEXT NOT NULL)
"""
#: the tables whose rows belong to one model, found by its id (besides its row of ``models``
#: and its entries of ``log``, found by their chain: :data:`CHAIN`)
MODEL_TABLES = ("configs", "meta", "state", "layouts", "ids", "pending")

#: a model's entries of ``log`` after a version, newest first, as ``chain(seq, version)``
#: (parameters: ?1 the model id, ?2 the version): walked from the head's ``last_entry`` back
#: by each entry's ``previous``, one lookup by ``seq`` a step.  ``log`` has no index by model
#: (whose leaf would be one more page each model of a pass dirties), so a step checks that it
#: found the model's entry of the version before: a checkpoint drops the entries it covers,
#: and SQLite may give a dropped ``seq`` (the highest) to the next entry of any model
CHAIN = """WITH RECURSIVE chain(seq, version, previous) AS (
    SELECT log.seq, log.version, log.previous FROM models JOIN log ON log.seq = models.last_entry
    WHERE models.id = ?1 AND log.model_id = ?1 AND log.version > ?2
    UNION ALL
    SELECT log.seq, log.version, log.previous FROM chain JOIN log ON log.seq = chain.previous
    WHERE log.model_id = ?1 AND log.version = chain.version - 1 AND log.version > ?2)
"""
