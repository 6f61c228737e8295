"""A model field for embeddings: pgvector's `vector` on PostgreSQL, float32 bytes elsewhere."""

from __future__ import annotations

from typing import Any

import numpy as np
from django.db import models


class EmbeddingField(models.Field):
    """Store an L2-normalised float32 vector of any dimension.

    The column has no fixed dimension so knowledge bases built by different embedders can
    share a table; PostgreSQL indexes each dimension with a partial HNSW index on a cast.
    """

    description = "An embedding vector"

    def db_type(self, connection) -> str:
        return "vector" if connection.vendor == "postgresql" else "blob"

    def get_db_prep_value(self, value: Any, connection, prepared: bool = False) -> Any:
        if value is None:
            return None
        vector = np.asarray(value, dtype=np.float32).ravel()
        if connection.vendor == "postgresql":
            return to_pgvector_text(vector)
        return vector.tobytes()

    def from_db_value(self, value: Any, expression, connection) -> np.ndarray | None:
        return parse_vector(value)

    def to_python(self, value: Any) -> np.ndarray | None:
        return parse_vector(value)


def to_pgvector_text(vector: np.ndarray) -> str:
    """Format a vector as pgvector's text input, e.g. "[0.1,0.2]"."""
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


def parse_vector(value: Any) -> np.ndarray | None:
    """Read a vector from pgvector text, raw float32 bytes, or a sequence."""
    if value is None or isinstance(value, np.ndarray):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return np.frombuffer(bytes(value), dtype=np.float32)
    if isinstance(value, str):
        return np.array(value.strip("[]").split(","), dtype=np.float32)
    return np.asarray(value, dtype=np.float32)
