"""The tuned-parameter store (read by the API below, written by `gemmlab.tune`): one JSON file per device under
the cache directory.

File: {"format": 1, "device": <device key>, "entries": {"<kernel>/<dtype>/<shape class>": {"params":
{name: int}, "tflops": number, "tuned_at": text, ...}}}. Key: (kernel, dtype, shape class). A shape class
buckets M, N and K by size so that one tuning run serves every problem of about that shape.

Every `kernel="auto"` call reads this file, so reading it never fails: entries of the wrong shape, for
another device, naming a kernel or parameter that no longer exists, or failing the spec's validate() are
dropped with one warning line that counts them; a file that cannot be used at all (it does not parse, is
empty, is a link or a folder) reads as empty with one warning line. The next save rewrites it cleanly.
Writes go to a temporary file that is renamed over the old one, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import math
import re
import stat
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kernels import registry
from .files import atomic_write
from .runtime.compiler import cache_root, json_kind
from .runtime.errors import GemmlabError

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


class TunedStoreError(GemmlabError, OSError):
    """The tuned-parameter file could not be written (its folder is read-only, a folder stands in its place)."""


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
        """Write every entry, replacing whatever stood at the path (a link is replaced, not followed)."""
        data = {"format": FORMAT, "device": self.device, "entries": self.entries}
        try:
            atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
        except OSError as exc:
            raise TunedStoreError(f"cannot save the tuned parameters to {self.path}: {exc.strerror or exc}") from exc


def _read(path: Path, device: str) -> dict[str, dict[str, Any]]:
    """The usable entries of the file at `path`; what cannot be used is dropped with one warning line."""
    try:
        mode = path.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return {}  # nothing tuned yet
    except OSError as exc:
        return _unusable(path, f"it cannot be read ({exc.strerror or exc})")
    if stat.S_ISLNK(mode):  # a link may point anywhere; the next save puts a file in its place
        return _unusable(path, "it is a symbolic link, not a file")
    if not stat.S_ISREG(mode):
        return _unusable(path, "it is a folder, not a file" if stat.S_ISDIR(mode) else "it is not a regular file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return _unusable(path, f"it cannot be read ({exc.strerror or exc})")
    if not raw.strip():
        return _unusable(path, "it does not parse (it is empty)")
    try:
        data = json.loads(raw)
    except RecursionError:  # nesting deeper than the parser's stack ('[' * 100000)
        return _unusable(path, "it does not parse (nested too deeply)")
    except ValueError as exc:  # also UnicodeDecodeError: bytes that are not text
        return _unusable(path, f"it does not parse ({_one_line(exc)})")
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("device") != device:
        return _unusable(path, f"it is not a format-{FORMAT} file for {device}")
    entries = data.get("entries", {})
    if not isinstance(entries, dict):
        count = f" ({len(entries)} ignored)" if isinstance(entries, list) else ""
        return _unusable(path, f"its entries are {json_kind(entries)}, not an object{count}")
    good: dict[str, dict[str, Any]] = {}
    dropped: list[str] = []
    for key, entry in entries.items():
        why = _entry_problem(key, entry)
        if why:
            dropped.append(f"{_clip(key)} ({_clip(why, 160)})")
        else:
            good[key] = entry
    if dropped:
        shown = "; ".join(dropped[:3]) + (f"; and {len(dropped) - 3} more" if len(dropped) > 3 else "")
        warnings.warn(f"ignoring {len(dropped)} of {len(entries)} tuned entries in {path}: {shown}", stacklevel=3)
    return good


def _entry_problem(key: str, entry: object) -> str | None:
    """Why the entry under `key` cannot be used on this device, or None: every field a lookup reads is
    type-checked (params: names to integers), then the kernel's spec validates the parameters."""
    parts = key.split("/")
    try:
        if len(parts) != 3 or not all(parts):
            raise ValueError(key)
        representative_shape(parts[2])
    except ValueError:
        return "not a kernel/dtype/shape-class key"
    if not isinstance(entry, dict):
        return f"it is {json_kind(entry)}, not an object"
    params = entry.get("params")
    if not isinstance(params, dict) or any(type(v) is not int for v in params.values()):
        return "its params are not an object of integers"
    tflops = entry.get("tflops", 0.0)
    if type(tflops) not in (int, float) or not math.isfinite(tflops):
        return "its tflops is not a finite number"
    try:
        registry.get(parts[0]).validate(params)
    except ValueError as exc:
        return _one_line(exc)
    return None


def _unusable(path: Path, why: str) -> dict[str, dict[str, Any]]:
    warnings.warn(f"ignoring the tuned-parameter file {path}: {why}", stacklevel=4)
    return {}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _clip(text: str, width: int = 80) -> str:
    """`text` on one line of at most `width` characters: keys and reasons come from files of any content."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
