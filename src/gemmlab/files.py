"""Writing the project's files so that no reader ever sees half of one: every file gemmlab writes (results,
reports, figures, the kernel cache, the tuning store, measured ceilings, pages) goes through `atomic_write`.

The data goes to a fresh temporary file beside the target (created exclusively, so a link planted under a
predictable name is never followed), is flushed, and replaces the target in one rename: a reader, or a
process interrupted at any point, finds the old file or the new one. Two processes writing the same file
leave one complete version (the last rename wins).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: str | Path, data: bytes | str, *, encoding: str = "utf-8") -> Path:
    """Write `data` (bytes, or text in `encoding`) to `path` atomically; creates the parent folders."""
    path = Path(path)
    raw = data.encode(encoding) if isinstance(data, str) else bytes(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
