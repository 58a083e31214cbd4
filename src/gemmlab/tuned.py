"""The tuned-parameter store (read by the API below, written by `gemmlab.tune`): one JSON file per device under
the cache directory.

Key: (kernel, dtype, shape class). A shape class buckets M, N and K by size so that one tuning run
serves every problem of about that shape. An entry that does not belong to this device, names a kernel
or parameter that no longer exists, or fails the spec's validate() is ignored with a warning; a file
that does not parse is ignored (and rewritten on the next save). Writes go to a temporary file that is
renamed over the old one, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kernels import registry
from .files import atomic_write
from .runtime.compiler import cache_root

FORMAT = 1
# Bucket edges for M, N and K: a dimension falls in the first bucket whose edge it does not exceed.
BUCKETS = (64, 256, 1024, 4096, 16384)


def _bucket(x: int) -> str:
    for edge in BUCKETS:
        if x <= edge:
            return f"le{edge}"
    return f"gt{BUCKETS[-1]}"


def shape_class(m: int, n: int, k: int) -> str:
    """E.g. 'm-le4096.n-le4096.k-le4096' for 4096^3; one tuned entry serves a whole class."""
    return f"m-{_bucket(m)}.n-{_bucket(n)}.k-{_bucket(k)}"


def representative_shape(cls: str) -> tuple[int, int, int]:
    """A problem inside the class to tune on: each dimension at its bucket's upper edge (or 2x the last)."""
    dims = []
    for part in cls.split("."):
        m = re.fullmatch(r"[mnk]-(le|gt)(\d+)", part)
        if not m:
            raise ValueError(f"not a shape class: {cls!r}")
        edge = int(m.group(2))
        dims.append(edge if m.group(1) == "le" else 2 * edge)
    return tuple(dims)  # type: ignore[return-value]


def device_key(name: str, cc: tuple[int, int], sm_count: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()
    return f"{slug}-sm{cc[0]}{cc[1]}-{sm_count}sms"


# Entries stored in this process so far: the API forgets the launches it remembered when this moves.
STORES = [0]


@dataclass
class TunedCache:
    """The tuned entries of one device."""

    device: str
    path: Path
    entries: dict[str, dict[str, Any]]

    @classmethod
    def for_device(cls, name: str, cc: tuple[int, int], sm_count: int, root: Path | None = None) -> "TunedCache":
        key = device_key(name, cc, sm_count)
        path = (root or cache_root() / "tuned") / f"{key}.json"
        return cls(key, path, _read(path, key))

    @staticmethod
    def entry_key(kernel: str, dtype: str, cls: str) -> str:
        return f"{kernel}/{dtype}/{cls}"

    def lookup(self, kernel: str, m: int, n: int, k: int, dtype: str = "float32") -> dict[str, int] | None:
        entry = self.entries.get(self.entry_key(kernel, dtype, shape_class(m, n, k)))
        return dict(entry["params"]) if entry else None

    def store(self, kernel: str, cls: str, params: dict[str, int], tflops: float, dtype: str = "float32",
              **extra: Any) -> None:
        STORES[0] += 1  # launches remembered before this entry may have other parameters now
        self.entries[self.entry_key(kernel, dtype, cls)] = {
            "params": dict(params), "tflops": tflops, "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra,
        }

    def save(self) -> None:
        data = {"format": FORMAT, "device": self.device, "entries": self.entries}
        atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True).encode())


def _read(path: Path, device: str) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        warnings.warn(f"ignoring the tuned-parameter file {path}: it does not parse ({exc})", stacklevel=3)
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("device") != device:
        warnings.warn(f"ignoring the tuned-parameter file {path}: it is not a format-{FORMAT} file for {device}",
                      stacklevel=3)
        return {}
    good: dict[str, dict[str, Any]] = {}
    for key, entry in (data.get("entries") or {}).items():
        kernel = str(key).split("/")[0]
        try:
            spec = registry.get(kernel)
            spec.validate(entry["params"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            warnings.warn(f"ignoring tuned entry {key!r} in {path}: {exc}", stacklevel=3)
            continue
        good[key] = entry
    return good
