"""LMDB databases as DALI's LMDBLoader reads them, for readers.caffe and readers.caffe2:
each `path` is an LMDB environment (a folder holding data.mdb), opened read-only without a
lock file; the records are the main database's entries in key order, the databases one
after the other in the order of `path`.

The `lmdb` package (py-lmdb) is an optional dependency, imported when a reader is made.
"""
import os
import weakref

# py-lmdb opens an environment once per process: readers of the same database share it
# (each with its own read transaction), for as long as one of them lives.
_OPEN = weakref.WeakValueDictionary()


def require_lmdb(op):
    """The lmdb module; an ImportError of `op` saying how to install it where it is missing."""
    try:
        import lmdb
    except ImportError:
        raise op.error("reading LMDB databases needs the lmdb package: pip install lmdb", ImportError) from None
    return lmdb


class Databases:
    """The records of the LMDB environments at `paths`: `keys` (db index, key bytes) in
    reading order, and `read(entries)` for their values. Each environment stays open with
    one read transaction for the reader's life (as in DALI), so values are read from the
    mapped file without a copy."""

    def __init__(self, op, paths):
        lmdb = require_lmdb(op)
        self.paths = list(paths)
        self.envs, self.txns, self.keys = [], [], []  # envs: held here, as _OPEN holds them weakly
        for d, path in enumerate(self.paths):
            if not os.path.exists(path):
                raise op.error(f"path '{path}' does not exist", ValueError, file=path)
            try:
                env = _OPEN.get(os.path.realpath(path))
                if env is None:
                    env = _OPEN[os.path.realpath(path)] = lmdb.open(path, readonly=True, lock=False, create=False)
                txn = env.begin(buffers=True)
                self.keys += [(d, bytes(k)) for k in txn.cursor().iternext(values=False)]
            except lmdb.Error as e:
                reason = str(e).split(": ", 1)[-1]
                raise op.error(f"cannot read '{path}' as an LMDB database (a folder holding data.mdb): {reason}",
                               file=path) from None
            self.envs.append(env)
            self.txns.append(txn)

    def name(self, entry):
        """DALI's source info of a record: '<path> at key <key>'."""
        d, key = self.keys[entry]
        return f"{self.paths[d]} at key {key.decode('utf-8', 'surrogateescape')}"

    def read(self, entries):
        """The values of records `entries` (memoryviews of the mapped databases)."""
        return [self.txns[d].get(key) for d, key in (self.keys[e] for e in entries)]
