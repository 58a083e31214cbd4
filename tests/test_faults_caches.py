"""The on-disk caches heal instead of failing: a damaged kernel-cache entry is compiled again, a folder that
takes no files keeps modules for the process, a thread's extra compile options stay in that thread, and a
damaged tuning store reads as what it still holds. Each case gives one warning line, never a traceback or
a wrong number (no GPU needed)."""

import json
import os
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from gemmlab import api
from gemmlab.cli import app
from gemmlab.kernels import get, registry
from gemmlab.runtime import compiler
from gemmlab.tuned import TunedCache, TunedStoreError, device_key

needs_nvrtc = pytest.mark.skipif(not compiler.nvrtc_available(), reason="NVRTC (cuda-bindings) not installed")
DEV = ("NVIDIA H100 80GB HBM3", (9, 0), 132)
SMALL = "smem_tiled/float32/m-le64.n-le64.k-le64"
LARGE = "smem_tiled/float32/m-le256.n-le256.k-le256"
TUNED = get("smem_tiled").validate({"BLOCK_DIM": 16})


def _kernel(dirpath: Path) -> Path:
    src = dirpath / "k.cu"
    src.write_text("template <int N> __global__ void k(float* x) { x[0] = N; }\n")
    return src


def _recorded(fn):
    """fn()'s result and the warnings it gave, every one recorded (none filtered as a repeat)."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in record]


# ------------------------------------------------------------------------------- kernel cache: entries


@needs_nvrtc
@pytest.mark.parametrize("damage", ["truncated", "emptied", "one byte flipped"])
def test_a_damaged_cubin_is_compiled_again_and_overwritten(tmp_path, monkeypatch, damage):
    """A cubin that does not match the size and sha256 in its meta file would fail every launch: it is
    a miss with one warning naming it, and the next process finds a good entry."""
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    src = _kernel(tmp_path)
    first = compiler.compile_file(src, ["k<1>"], "sm_90")
    good, path = first.cubin, first.cubin_path
    bad = {"truncated": good[:10], "emptied": b"",
           "one byte flipped": good[:100] + bytes([good[100] ^ 1]) + good[101:]}[damage]
    path.write_bytes(bad)
    compiler.clear_memory_cache()
    again, messages = _recorded(lambda: compiler.compile_file(src, ["k<1>"], "sm_90"))
    assert not again.from_disk_cache and again.cubin == good
    assert len(messages) == 1 and str(path) in messages[0] and "\n" not in messages[0]
    compiler.clear_memory_cache()
    healed, messages = _recorded(lambda: compiler.compile_file(src, ["k<1>"], "sm_90"))
    assert healed.from_disk_cache and healed.cubin == good and messages == []


def _ill_typed_registers(meta: dict) -> dict:
    meta["resources"]["k<2>"]["registers"] = "40"
    return meta


def _missing_registers(meta: dict) -> dict:
    del meta["resources"]["k<2>"]["registers"]  # would read as 0 registers from a report marked known
    return meta


def _no_digest(meta: dict) -> dict:
    del meta["cubin_sha256"]
    return meta


@needs_nvrtc
@pytest.mark.parametrize("meta", ["null", "[1, 2]", "not json at all", "[" * 100000, "\x00\xff\xfe",
                                  _ill_typed_registers, _missing_registers, _no_digest],
                         ids=["null", "array", "text", "deeply nested", "binary", "registers a string",
                              "registers missing", "no digest"])
def test_an_unreadable_or_ill_typed_meta_file_is_a_miss(tmp_path, monkeypatch, meta):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    src = _kernel(tmp_path)
    first = compiler.compile_file(src, ["k<2>"], "sm_90")
    meta_path = first.cubin_path.with_suffix(".json")
    if callable(meta):
        meta_path.write_text(json.dumps(meta(json.loads(meta_path.read_text()))))
    else:
        meta_path.write_bytes(meta.encode("latin-1"))
    compiler.clear_memory_cache()
    again, messages = _recorded(lambda: compiler.compile_file(src, ["k<2>"], "sm_90"))
    assert not again.from_disk_cache and again.resources == first.resources
    assert len(messages) == 1 and str(meta_path) in messages[0] and "\n" not in messages[0]
    rewritten = json.loads(meta_path.read_text())
    assert rewritten["cubin_size"] == len(first.cubin) and rewritten["lowered_names"]["k<2>"].startswith("_Z")


@needs_nvrtc
def test_kernels_command_lists_rungs_whose_cache_entries_are_damaged(tmp_path, monkeypatch):
    """`gemmlab kernels` reads the cache through the compiler: damaged meta files are misses there too."""
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "all_specs", lambda: [get("naive")])  # one rung keeps the compile short
    compiler.clear_memory_cache()
    runner = CliRunner()
    assert runner.invoke(app, ["kernels", "--arch", "sm_80"], terminal_width=200).exit_code == 0
    metas = list((tmp_path / "cache" / "kernels").glob("*.json"))
    assert metas
    for path in metas:
        path.write_text("null")
    compiler.clear_memory_cache()
    r, messages = _recorded(lambda: runner.invoke(app, ["kernels", "--arch", "sm_80"], terminal_width=200))
    compiler.clear_memory_cache()
    assert r.exit_code == 0, r.output
    assert "naive" in r.output and "compile failed" not in r.output
    assert len(messages) == len(metas) and all("\n" not in m for m in messages)


# ------------------------------------------------------------------------------- kernel cache: folder


@needs_nvrtc
@pytest.mark.parametrize("place", ["read-only folder", "a file"])
def test_a_cache_folder_that_takes_no_files_keeps_modules_for_the_process(tmp_path, monkeypatch, place):
    if place == "read-only folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        root = tmp_path / "cache"
        (root / "kernels").mkdir(parents=True)
        for folder in (root / "kernels", root):
            folder.chmod(0o500)
    else:
        root = tmp_path / "cache-file"
        root.write_text("not a folder")
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(root))
    src = _kernel(tmp_path)
    try:
        (one, two), messages = _recorded(lambda: [compiler.compile_file(src, [f"k<{i}>"], "sm_90") for i in (3, 4)])
    finally:
        if root.is_dir():
            for folder in (root, root / "kernels"):
                folder.chmod(0o700)
    assert len(messages) == 1, "one warning for the folder, not one per compile"
    assert str(compiler.cache_dir()) in messages[0] and "\n" not in messages[0]
    for mod in (one, two):
        assert not mod.from_disk_cache and mod.cubin[:4] == b"\x7fELF"
        assert mod.cubin_path.exists() and root not in mod.cubin_path.parents  # a file the loader can take
    assert compiler.compile_file(src, ["k<3>"], "sm_90") is one  # kept in memory: not compiled again


# ------------------------------------------------------------------------------- added options


def test_options_added_in_one_thread_do_not_reach_another(monkeypatch):
    monkeypatch.delenv("GEMMLAB_NVRTC_OPTIONS", raising=False)
    inside, release = threading.Event(), threading.Event()
    seen: dict[str, tuple] = {}

    def traced_build():
        with compiler.options_added("-DGEMMLAB_TRACE=1"):
            seen["inside"] = compiler.added_options()
            inside.set()
            release.wait(10)
        seen["after"] = compiler.added_options()

    thread = threading.Thread(target=traced_build)
    thread.start()
    assert inside.wait(10)
    seen["other thread"] = compiler.added_options()
    release.set()
    thread.join(10)
    assert seen == {"inside": ("-DGEMMLAB_TRACE=1",), "other thread": (), "after": ()}
    with compiler.options_added("-lineinfo"), compiler.options_added("-DX=1"):  # nesting, within one thread
        assert compiler.added_options() == ("-lineinfo", "-DX=1")
    assert compiler.added_options() == ()


# ------------------------------------------------------------------------------- tuning store


def _store_file(tmp_path) -> tuple[TunedCache, dict]:
    """A saved store with one good entry, and its data."""
    cache = TunedCache.for_device(*DEV, root=tmp_path)
    cache.store("smem_tiled", "m-le64.n-le64.k-le64", TUNED, 1.0)
    cache.save()
    return cache, json.loads(cache.path.read_text())


@pytest.mark.parametrize("entry", [{"params": None}, {"params": {"BLOCK_DIM": "16"}}, {"params": {"BLOCK_DIM": 16.0}},
                                   {"params": {"BLOCK_DIM": True}}, {"params": [16]}, None, [1], "params",
                                   {"params": {"BLOCK_DIM": 16}, "tflops": "fast"}, {}],
                         ids=["params null", "params a string", "params a float", "params a boolean",
                              "params an array", "entry null", "entry an array", "entry a string",
                              "tflops a string", "no params"])
def test_ill_typed_tuned_entries_are_dropped_one_by_one(tmp_path, entry):
    cache, data = _store_file(tmp_path)
    data["entries"][LARGE] = entry
    cache.path.write_text(json.dumps(data))
    again, messages = _recorded(lambda: TunedCache.for_device(*DEV, root=tmp_path))
    assert len(messages) == 1 and str(cache.path) in messages[0] and "1 of 2" in messages[0]
    assert "\n" not in messages[0]
    assert again.lookup("smem_tiled", 200, 200, 200) is None
    assert again.lookup("smem_tiled", 50, 50, 50) == TUNED
    again.save()
    assert _recorded(lambda: TunedCache.for_device(*DEV, root=tmp_path).entries)[1] == []
    assert list(json.loads(cache.path.read_text())["entries"]) == [SMALL]


def test_a_malformed_entry_key_is_dropped(tmp_path):
    cache, data = _store_file(tmp_path)
    data["entries"]["smem_tiled"] = data["entries"]["not/a/shape-class"] = data["entries"][SMALL]
    cache.path.write_text(json.dumps(data))
    again, messages = _recorded(lambda: TunedCache.for_device(*DEV, root=tmp_path))
    assert len(messages) == 1 and "2 of 3" in messages[0]
    assert list(again.entries) == [SMALL]


@pytest.mark.parametrize("entries", [[1], [{"params": {"BLOCK_DIM": 16}}], "abc", None, 7])
def test_entries_that_are_not_an_object_read_as_none(tmp_path, entries):
    cache, data = _store_file(tmp_path)
    data["entries"] = entries
    cache.path.write_text(json.dumps(data))
    again, messages = _recorded(lambda: TunedCache.for_device(*DEV, root=tmp_path))
    assert len(messages) == 1 and str(cache.path) in messages[0] and "not an object" in messages[0]
    if isinstance(entries, list):
        assert f"{len(entries)} ignored" in messages[0]
    assert again.entries == {} and again.lookup("smem_tiled", 50, 50, 50) is None


def _symlink_elsewhere(path: Path) -> None:
    elsewhere = path.parent.parent / "elsewhere.json"
    elsewhere.write_text(path.read_text())
    path.unlink()
    path.symlink_to(elsewhere)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("damage", [
    lambda p: p.write_text("[" * 100000),
    lambda p: p.write_bytes(b""),
    lambda p: p.write_bytes(bytes(range(256)) * 8),
    lambda p: p.write_text("null"),
    _symlink_elsewhere,
    _directory,
], ids=["deeply nested", "empty", "binary", "null", "symlink elsewhere", "a folder in its place"])
def test_an_unusable_tuned_file_reads_as_empty_with_one_warning(tmp_path, damage):
    cache, _ = _store_file(tmp_path / "tuned")
    damage(cache.path)
    again, messages = _recorded(lambda: TunedCache.for_device(*DEV, root=tmp_path / "tuned"))
    assert len(messages) == 1 and str(cache.path) in messages[0] and "\n" not in messages[0]
    assert again.entries == {} and again.lookup("smem_tiled", 50, 50, 50) is None
    again.store("smem_tiled", "m-le64.n-le64.k-le64", {"BLOCK_DIM": 8}, 1.0)
    if cache.path.is_dir():  # nothing can be written there: one line of error, no traceback
        with pytest.raises(TunedStoreError, match="cannot save the tuned parameters") as err:
            again.save()
        assert "\n" not in str(err.value)
        return
    again.save()  # rewrites it as a plain file (a link is replaced, never followed)
    assert cache.path.is_file() and not cache.path.is_symlink()
    healed, messages = _recorded(lambda: TunedCache.for_device(*DEV, root=tmp_path / "tuned"))
    assert messages == [] and healed.lookup("smem_tiled", 50, 50, 50) == {"BLOCK_DIM": 8}
    if (tmp_path / "elsewhere.json").exists():
        assert json.loads((tmp_path / "elsewhere.json").read_text())["entries"][SMALL]["params"] == TUNED


def test_auto_dispatch_reads_a_damaged_store_as_no_entry(tmp_path, monkeypatch):
    """The path of every kernel="auto" call: a null params entry gives the heuristic, with one warning."""
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(api.dispatch, "_tuned", {})
    info = SimpleNamespace(name="test device", compute_capability=(9, 0), sm_count=132)
    key = device_key(info.name, info.compute_capability, info.sm_count)
    path = tmp_path / "tuned" / f"{key}.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"format": 1, "device": key,
                                "entries": {"sgemm/float32/m-le4096.n-le4096.k-le4096": {"params": None}}}))
    choice, messages = _recorded(lambda: api.explain_choice("float32", shape=(4096, 4096, 4096), info=info))
    assert choice.params_source == "heuristic" and len(messages) == 1 and str(path) in messages[0]
