"""The one atomic write every file of the project goes through: readers see a whole old or a whole new
file, concurrent writers leave one complete version, an interrupted write leaves the old file and no
temporary file, and a link planted beside the target is never followed."""

import os
import threading

import pytest

from gemmlab.files import atomic_write


def test_concurrent_writers_and_readers_see_whole_files_only(tmp_path):
    path = tmp_path / "results.json"
    versions = [("[" + ",".join([str(i)] * 20000) + "]").encode() for i in range(6)]
    atomic_write(path, versions[0])
    stop = threading.Event()
    seen, bad = set(), []

    def write(v):
        for _ in range(15):
            atomic_write(path, v)

    def read():
        while not stop.is_set():
            data = path.read_bytes()
            if data in versions:
                seen.add(data[:20])
            else:
                bad.append(len(data))

    readers = [threading.Thread(target=read) for _ in range(2)]
    writers = [threading.Thread(target=write, args=(v,)) for v in versions]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert not bad, f"{len(bad)} partial reads"
    assert path.read_bytes() in versions
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left behind


def test_an_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "store.json"
    atomic_write(path, "old")

    def boom(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["store.json"]


def test_a_link_beside_the_target_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for name in ("out.json.tmp", ".out.json.tmp"):
        (tmp_path / name).symlink_to(victim)
    atomic_write(tmp_path / "out.json", "data")
    assert victim.read_text() == "keep" and (tmp_path / "out.json").read_text() == "data"
