"""The Python API end to end: pytest python/tests (after pip install ./python)."""

import threading
import time

import pytest

import tphdb


@pytest.fixture
def db(tmp_path):
    with tphdb.DB(tmp_path / "db", write_buffer_size=1 << 20) as d:
        yield d


def test_bytes_in_bytes_out(db):
    db.put(b"k", b"v")
    db[b"a\x00b"] = b"\xff\x00"
    assert db.get(b"k") == b"v"
    assert db[b"a\x00b"] == b"\xff\x00"
    assert db.get(b"missing") is None
    assert db.get(b"missing", b"default") == b"default"
    assert b"k" in db and b"missing" not in db
    with pytest.raises(KeyError):
        db[b"missing"]
    del db[b"k"]
    del db[b"never there"]  # as in RocksDB: not an error
    assert db.get(b"k") is None
    with pytest.raises(TypeError):
        db.put("str key", b"v")


def test_write_batch_applies_on_exit_and_not_after_an_exception(db):
    db[b"gone"] = b"1"
    with db.write_batch() as b:
        b.put(b"x", b"1")
        b.delete(b"gone")
        assert len(b) == 2
    assert db[b"x"] == b"1" and b"gone" not in db
    with pytest.raises(RuntimeError):
        with db.write_batch() as b:
            b.put(b"y", b"1")
            raise RuntimeError("abandon")
    assert b"y" not in db
    batch = tphdb.WriteBatch()
    batch.put(b"z", b"2")
    db.write(batch, sync=True)
    assert db[b"z"] == b"2"


def test_iterate_with_bounds_prefix_and_reverse(db):
    for i in range(1000):
        db.put(b"key%04d" % i, b"value%d" % i)
    db.put(b"other", b"o")
    db.flush()
    items = list(db.iterate(start=b"key0100", stop=b"key0105"))
    assert items == [(b"key%04d" % i, b"value%d" % i) for i in range(100, 105)]
    back = list(db.iterate(start=b"key0100", stop=b"key0105", reverse=True, keys_only=True))
    assert back == [b"key%04d" % i for i in range(104, 99, -1)]
    assert len(list(db.iterate(prefix=b"key09"))) == 100
    assert list(db.iterate(prefix=b"oth")) == [(b"other", b"o")]
    assert list(db)[:2] == [b"key0000", b"key0001"]
    assert len(list(db.iterate(reverse=True))) == 1001


def test_snapshot_sees_its_time(db):
    db[b"k"] = b"old"
    with db.snapshot() as snap:
        db[b"k"] = b"new"
        db[b"added"] = b"1"
        db.flush()
        assert snap[b"k"] == b"old" and b"added" not in snap
        assert list(snap.iterate()) == [(b"k", b"old")]
        assert list(db.iterate(snapshot=snap)) == [(b"k", b"old")]
    with pytest.raises(tphdb.ClosedError):
        snap.get(b"k")


def test_errors_keep_their_kind(tmp_path):
    path = tmp_path / "db"
    d = tphdb.DB(path)
    d.put(b"k", b"v")
    with pytest.raises(tphdb.BusyError):
        tphdb.DB(path)
    with pytest.raises(tphdb.InvalidArgumentError):
        d.put(b"x" * ((1 << 20) + 1), b"v")
    d.close()
    d.close()  # twice is fine
    assert d.closed
    with pytest.raises(tphdb.ClosedError):
        d.get(b"k")
    ro = tphdb.DB(path, read_only=True)
    assert ro[b"k"] == b"v"
    with pytest.raises(tphdb.ReadOnlyError):
        ro.put(b"k", b"w")
    ro.close()
    # Damage a piece: reads report corruption, not a wrong value.
    with tphdb.DB(path) as d:
        d.flush()
    piece = sorted(path.glob("*.ph"))[0]
    data = bytearray(piece.read_bytes())
    data[len(data) // 2] ^= 0xFF
    piece.write_bytes(bytes(data))
    with pytest.raises(tphdb.Error) as e:
        with tphdb.DB(path) as d:
            list(d.iterate())
            d.get(b"k")
    assert isinstance(e.value, (tphdb.CorruptionError, tphdb.IoError))
    with pytest.raises(tphdb.Error):
        tphdb.DB(tmp_path / "absent", create_if_missing=False)
    with pytest.raises(ValueError):
        tphdb.DB(tmp_path / "x", sync="sometimes")


def test_ingest_checkpoint_stats_and_reopen(tmp_path):
    path = tmp_path / "db"
    with tphdb.DB(path, write_buffer_size=1 << 20, sync=1000) as d:
        n = d.ingest((b"k%06d" % (i * 7919 % 50000), b"v%d" % i) for i in range(50000))
        assert n == 50000
        d.put(b"after", b"load")
        d.checkpoint(tmp_path / "copy")
        stats = d.stats()
        assert stats["writes"] >= 50000 and stats["index_bytes_per_key"] > 0
        assert 0 <= stats["slowest_flush_micros"] <= stats["flush_micros"]
        paced = ("level0", "level0_compaction", "memtable", "one_level")
        assert sum(stats[f"paced_{p}_micros"] for p in paced) <= stats["stall_micros"]
        assert int(d.property("tphdb.estimate-num-keys")) > 0
    with tphdb.DB(tmp_path / "copy", read_only=True) as c:
        assert c[b"after"] == b"load"
        assert sum(1 for _ in c) == 50001


def test_threads_share_a_database(db):
    def writer(t):
        for i in range(2000):
            db.put(b"t%d-%d" % (t, i), b"x" * 100)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(1 for _ in db) == 8000


def test_engine_calls_release_the_gil(tmp_path):
    # While one thread is inside a long call (a full compaction), another
    # runs Python code: it takes timestamps inside the call's span. Were the
    # GIL held through the call, none could fall inside it.
    with tphdb.DB(tmp_path / "db", write_buffer_size=1 << 20) as d:
        d.ingest((b"%08d" % (i * 7919 % 200000), b"x" * 100) for i in range(200000))
        span = []

        def compact():
            start = time.perf_counter()
            d.compact()
            span.extend([start, time.perf_counter()])

        worker = threading.Thread(target=compact)
        stamps = []
        worker.start()
        while worker.is_alive():
            stamps.append(time.perf_counter())
            time.sleep(0.001)
        worker.join()
        start, end = span
        inside = [s for s in stamps if start < s < end]
        assert end - start > 0.02, "the compaction was too short to tell"
        assert len(inside) >= 5, (len(inside), end - start)
