"""Where checkpoints live: a directory, or a prefix in object storage (checkpoint.storage). The
operator, the CLI and the runtime tell them apart the same way."""

from __future__ import annotations

OBJECT_SCHEMES = ("s3", "gs", "gcs")


def is_object_uri(location: str | None) -> bool:
    """``s3://…``, ``gs://…``: object storage (fsspec reaches it); anything else is a path."""
    scheme, sep, rest = (location or "").partition("://")
    return bool(sep and rest) and scheme in OBJECT_SCHEMES
