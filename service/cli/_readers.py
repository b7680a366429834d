"""Files for ``aucstream replay`` and ``fit`` (CSV / TSV, Parquet, LIBSVM, NPZ) under the policies
docs/cli.md states, each refusal one line naming the row (from 1 after the header) and column.
Features go through the server's own checks, so a file learns what its events posted would.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np

from core.csr import CSRMatrix
from core.validation import as_labels
from service.cli._errors import CliError
from service.errors import ServiceError
from service.ingest import fields
from service.ingest.batch import FeatureSpec
from service.ingest.objects import hashed_features
from service.schemas import MissingValuesName

FORMATS = ("auto", "csv", "parquet", "libsvm", "npz")
#: the server's missing_values policies (``POST /v1/models``), under the same names
MISSING_POLICIES: tuple[str, ...] = get_args(MissingValuesName)
#: [CHOICE] A sparse file with at most this many features makes a dense model, which ``auto``
#: scaling can centre (better ranking unless every feature is one-hot: bench/README.md
#: "replay_defaults.py"); above, dense rows cost too much per event.
DENSE_MAX_FEATURES = 1000
MISSING_HELP = (
    "what a missing feature value does, as the server's missing_values (the new model's "
    "policy): refuse it naming its row and column, read it as zero, or as the feature's "
    "running mean over the events learned before it (a sparse or hashed model leaves it out, "
    "as zero does)"
)
#: label columns recognised without --label-column, in this order (case-insensitive)
LABEL_NAMES = ("y", "label", "target", "class", "is_fraud")
_EXTENSIONS = {
    "csv": (".csv", ".tsv", ".csv.gz", ".tsv.gz", ".csv.zip", ".csv.bz2", ".csv.xz"),
    "parquet": (".parquet", ".pq", ".parq"),
    "libsvm": (".libsvm", ".svm", ".svmlight", ".txt", ".dat"),
    "npz": (".npz",),
}


@dataclass
class ReplayData:
    """A file's events: features, labels in {-1, +1}, ``--id-column`` ids, 1-based row
    numbers, feature names (tables only) and the digest of the file's bytes."""

    X: np.ndarray | CSRMatrix
    y: np.ndarray
    ids: list[str] | None
    rows: np.ndarray
    feature_names: list[str] | None
    digest: str
    #: ``--feature-mode hashed``: each event's ``{"column": value}`` as a server is sent it
    named_events: list[dict[str, Any]] | None = None

    @property
    def n_events(self) -> int:
        return int(self.X.shape[0])

    @property
    def has_missing(self) -> bool:
        """Whether a feature value is missing (NaN, left for the model's policy)."""
        values = self.X.data if isinstance(self.X, CSRMatrix) else self.X
        return bool(np.isnan(values).any())

    def event_ids(self) -> list[str]:
        """The id column, else ``<digest>-<row>``: replaying the same file again into a server
        skips what it learned."""
        if self.ids is not None:
            return self.ids
        return [f"{self.digest}-{row}" for row in self.rows.tolist()]


def add_file_options(parser: argparse.ArgumentParser) -> None:
    """The options of a subcommand that reads an events file (replay, fit), in one group."""
    group = parser.add_argument_group("reading the file")
    group.add_argument("--format", choices=FORMATS, default="auto", help="file format")
    group.add_argument("--label-column", help="CSV / Parquet label column")
    group.add_argument("--id-column", help="CSV / Parquet event id column")
    group.add_argument("--missing", choices=MISSING_POLICIES, default="refuse", help=MISSING_HELP)
    group.add_argument("--drop-non-numeric", action="store_true",
                       help="leave out text columns instead of refusing the file")  # fmt: skip
    group.add_argument("--zero-based", action="store_true", help="LIBSVM indices start at 0")
    group.add_argument("--positive-label", metavar="VALUE",
                       help="CSV / Parquet: the label value of the positive class (every other "
                       "value is negative), e.g. --positive-label denied")  # fmt: skip


def read_file_events(args: argparse.Namespace) -> ReplayData:
    """The events of ``args.file`` read with the options of :func:`add_file_options` (and the
    feature mode of a new model)."""
    file_format = detect_format(args.file) if args.format == "auto" else args.format
    digest = file_digest(args.file)  # also the first read: a missing file fails here, in one line
    if file_format in ("csv", "parquet"):
        return table_events(read_frame(args.file, file_format, args.id_column), args, digest)
    hashed = "hashed" if args.feature_mode == "hashed" else None
    for option, value in (("--id-column", args.id_column), ("--label-column", args.label_column),
                          ("--positive-label", args.positive_label),
                          ("--feature-mode hashed", hashed)):  # fmt: skip
        if value is not None:
            raise CliError(f"{option} is for CSV and Parquet files, not {file_format}")
    if file_format == "libsvm":
        X, y = read_libsvm(args.file, args.zero_based, args.missing, args.feature_mode)
    else:
        X, y = read_npz(args.file)
        if args.missing == "refuse":
            dense_values = X.toarray() if isinstance(X, CSRMatrix) else X
            refuse_missing(np.isnan(dense_values), [f"{j}" for j in range(X.shape[1])])
    rows = np.arange(1, len(y) + 1)
    return ReplayData(X, checked_labels(y, "the labels", rows), None, rows, None, digest)


def default_feature_mode(sparse_file: bool, n_features: int) -> str:
    """A new model's feature mode when ``--feature-mode`` is not given (DENSE_MAX_FEATURES)."""
    return "sparse" if sparse_file and n_features > DENSE_MAX_FEATURES else "dense"


def model_features(
    X: np.ndarray | CSRMatrix, spec: FeatureSpec, rows: np.ndarray
) -> np.ndarray | CSRMatrix:
    """``X`` (in the model's layout) through the server's checks of an NPZ batch for ``spec``
    (missing values by its policy, infinities, the feature bound), naming the file's ``rows``."""
    return _checked_rows(rows, fields.sparse if isinstance(X, CSRMatrix) else fields.dense, X, spec)


def _checked_rows(rows: np.ndarray, check: Callable[..., Any], *args: Any) -> Any:
    """``check(*args, locator)``, one of the server's checks, its refusal naming the row."""
    try:
        return check(*args, fields.Locator(None, rows.tolist()))
    except ServiceError as error:
        raise CliError(error.detail.replace("line ", "row ", 1)) from None


def file_digest(path: str) -> str:
    """First 16 hex digits of the SHA-256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def detect_format(path: str) -> str:
    lowered = path.lower()
    for name, extensions in _EXTENSIONS.items():
        if lowered.endswith(extensions):
            return name
    raise CliError(
        f"cannot tell the format of {path} from its name; pass --format ({', '.join(FORMATS[1:])})"
    )


def read_frame(path: str, file_format: str, id_column: str | None):
    import pandas as pd

    try:
        if file_format == "parquet":
            frame = pd.read_parquet(path)
        else:
            separator = "\t" if re.search(r"\.tsv(\.\w+)?$", path.lower()) else ","
            id_types = {id_column: str} if id_column is not None else None
            # correctly rounded floats: pandas 2's default parser can be 1 ulp off
            precision = {"float_precision": "round_trip"} if pd.__version__ < "3" else {}
            frame = pd.read_csv(
                path, sep=separator, dtype=id_types, skipinitialspace=True, **precision
            )
    except ImportError as error:
        raise CliError(f"reading {file_format} needs {error.name}: pip install pyarrow") from None
    except pd.errors.EmptyDataError:
        raise CliError(f"{path} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise CliError(f"cannot read {path} as {file_format}: {error}") from None
    if len(frame) == 0:
        raise CliError(f"{path} has a header but no rows")
    frame.columns = [str(name).strip() for name in frame.columns]
    return frame


def table_events(frame, args: argparse.Namespace, digest: str) -> ReplayData:
    import pandas as pd

    path, label_column, id_column = args.file, args.label_column, args.id_column
    hashed = args.feature_mode == "hashed"
    columns = list(frame.columns)
    if label_column is None:
        lowered = {name.lower(): name for name in reversed(columns)}  # the first of equals
        label_column = next((lowered[name] for name in LABEL_NAMES if name in lowered), columns[-1])
    for option, name in (("--label-column", label_column), ("--id-column", id_column)):
        if name is not None and name not in columns:
            raise CliError(f"{option}: no column {name!r} in {path}; columns: {_names(columns)}")
    if id_column == label_column:
        raise CliError("--id-column and --label-column name the same column")
    rows = np.arange(1, len(frame) + 1)
    feature_columns = [name for name in columns if name not in (label_column, id_column)]

    def numeric(name: str) -> bool:
        return pd.api.types.is_numeric_dtype(frame[name]) or pd.api.types.is_bool_dtype(frame[name])

    # a hashed model takes text: "country": "FR" is the feature country=FR
    text = [] if hashed else [name for name in feature_columns if not numeric(name)]
    if text and not args.drop_non_numeric:
        raise CliError(
            f"non-numeric column(s) {_names(text)} in {path}: features must be numbers; pass "
            "--feature-mode hashed to one-hot encode them (column=value), --drop-non-numeric "
            "to leave them out, or --id-column for an id"
        )
    if text:
        print(f"aucstream: note: left out non-numeric column(s) {_names(text)}", file=sys.stderr)
        feature_columns = [name for name in feature_columns if name not in text]
    if not feature_columns:
        raise CliError(f"{path} has no feature column besides the label and id")
    if args.missing == "refuse":
        refuse_missing(frame[feature_columns].isna().to_numpy(), feature_columns)
    for name in (label_column, id_column):
        if name is not None and frame[name].isna().any():
            row = int(rows[np.flatnonzero(frame[name].isna().to_numpy())[0]])
            raise CliError(f"row {row}: no value in column {name!r} (labels and ids are needed)")
    y = table_labels(frame[label_column], label_column, rows, args.positive_label)
    ids = None if id_column is None else frame[id_column].astype(str).tolist()
    if hashed:
        named = named_rows(frame[feature_columns])
        hashed_X = hashed_rows(named, args.hash_features, rows)
        return ReplayData(hashed_X, y, ids, rows, None, digest, named_events=named)
    # a missing cell stays NaN: model_features applies the model's policy to it
    X = np.ascontiguousarray(frame[feature_columns].to_numpy(dtype=np.float64, na_value=np.nan))
    infinite = np.argwhere(np.isinf(X))
    if len(infinite):
        row, column = infinite[0]
        raise CliError(f"row {rows[row]}, column {feature_columns[column]!r}: infinite value")
    return ReplayData(X, y, ids, rows, feature_columns, digest)


def named_rows(features) -> list[dict[str, Any]]:
    """Each row as a JSON event's ``{"column": value}``, missing cells left out (0 when hashed)."""
    import pandas as pd

    records = features.astype(object).where(features.notna(), None).to_dict("records")
    return [
        {
            name: value.item() if isinstance(value, np.generic) else value
            for name, value in record.items()
            if value is not None and value is not pd.NA
        }
        for record in records
    ]


def hashed_rows(named: list[dict[str, Any]], width: int, rows: np.ndarray) -> CSRMatrix:
    """The events hashed as the server hashes a JSON event."""
    return _checked_rows(rows, hashed_features, named, FeatureSpec(width, "hashed"))


#: label words read without --positive-label (any case): (positive, negative)
LABEL_WORDS = (("yes", "no"), ("true", "false"))


def table_labels(column, name: str, rows: np.ndarray, positive_label: str | None) -> np.ndarray:
    """A table's label column in {-1, +1}: ``--positive-label`` against every other value, else
    0/1, -1/+1, booleans, yes/no or true/false; otherwise one line naming the values found."""
    import pandas as pd

    if positive_label is not None:
        positive = column.astype(str).str.strip() == positive_label.strip()
        if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
            try:
                positive = column == float(positive_label)
            except ValueError:
                pass  # compared as text: no row matches, which is said below
        if not positive.any():
            raise CliError(f"--positive-label {positive_label!r}: no row of label column "
                           f"{name!r} has it; values found: {_found(column)}")  # fmt: skip
        return np.where(positive.to_numpy(), 1, -1).astype(np.int64)
    if column.dtype == object or pd.api.types.is_string_dtype(column):
        words = column.astype(str).str.strip().str.lower()
        found = set(words.unique())
        for yes, no in LABEL_WORDS:
            if found <= {yes, no}:
                return np.where((words == yes).to_numpy(), 1, -1).astype(np.int64)
        raise CliError(
            f"label column {name!r} is not binary: values found {_found(column)}; labels are "
            "0/1, -1/+1, true/false or yes/no (any case); name the positive class with "
            "--positive-label VALUE"
        )
    try:
        return checked_labels(column.to_numpy(), f"label column {name!r}", rows)
    except CliError as error:
        raise CliError(f"{error.message}; values found: {_found(column)}; name the positive "
                       "class with --positive-label VALUE") from None  # fmt: skip


def _found(column) -> str:
    """The distinct values of a column, most frequent first, with their counts."""
    counts = column.value_counts(dropna=False)
    return fields.first_of(
        (f"{value!r} ({count:,})" for value, count in counts.items()), len(counts), 8
    )


def refuse_missing(absent: np.ndarray, feature_columns: list[str]) -> None:
    """``--missing refuse``: the first missing cell of the mask ``absent``, by row and column."""
    if not absent.any():
        return
    row, column = np.argwhere(absent)[0]
    count = int(absent.sum())
    raise CliError(
        f"row {row + 1}, column {feature_columns[column]!r}: missing value ({count} missing "
        "cell(s) in all); pass --missing zero to read them as 0 or --missing mean to read "
        "them as the feature's running mean"
    )


def checked_labels(values: np.ndarray, what: str, rows: np.ndarray) -> np.ndarray:
    """Labels in {-1, +1} (from 0/1, -1/+1 or booleans), or one line naming the bad row."""
    try:
        return as_labels(values)
    except ValueError as error:
        row = getattr(error, "row", None)
        where = f" (row {rows[row]})" if row is not None else ""
        raise CliError(f"{what}: {error}{where}") from None


def _names(names: list[str]) -> str:
    return fields.first_of(map(repr, names), len(names), 8)


def read_libsvm(
    path: str, zero_based: bool, missing: str = "refuse", feature_mode: str | None = None
) -> tuple[np.ndarray | CSRMatrix, np.ndarray]:
    """The events of a LIBSVM file, parsed as the server parses them for the model the file
    makes (an ``index:nan`` pair refused, left out, or refused by a dense ``mean`` model)."""
    from service.ingest import libsvm_events

    with open(path, "rb") as handle:
        body = handle.read()
    indices = [int(token) for token in re.findall(rb"(\d+):", body)]
    n_features = max((max(indices) + (1 if zero_based else 0)) if indices else 1, 1)
    mode = feature_mode or default_feature_mode(True, n_features)
    layout = "dense" if missing == "mean" and mode == "dense" else "sparse"
    spec = FeatureSpec(n_features, layout, missing_values=missing)  # type: ignore[arg-type]
    batch = libsvm_events(body, spec, labelled=True, max_events=sys.maxsize,
                          zero_based=zero_based, max_dense_cells=sys.maxsize)  # fmt: skip
    assert batch.y is not None
    return batch.X, batch.y


def read_npz(path: str) -> tuple[np.ndarray | CSRMatrix, np.ndarray]:
    """``X`` and ``y``, or the CSR triple ``indptr``, ``indices``, ``data`` (and ``shape``)."""
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as archive:
            names = set(archive.files)
            if "y" not in names or not ({"X"} <= names or {"indptr", "indices", "data"} <= names):
                raise CliError(
                    f"{path} holds {sorted(names)}; expected y and X, or y and the CSR arrays "
                    "indptr, indices, data"
                )
            y = archive["y"]
            if "X" in names:
                X = np.asarray(archive["X"], dtype=np.float64)
                if X.ndim != 2:
                    raise CliError(f"{path}: X must be 2-d, got shape {X.shape}")
                return np.ascontiguousarray(X), y
            indptr, indices = (archive[name].astype(np.int64) for name in ("indptr", "indices"))
            data = archive["data"].astype(np.float64)
            d = int(archive["shape"][1]) if "shape" in names else int(indices.max(initial=0)) + 1
            return CSRMatrix(indptr, indices, data, d), y
    except (zipfile.BadZipFile, ValueError) as error:
        raise CliError(f"cannot read {path} as .npz: {error}") from None
