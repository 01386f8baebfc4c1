#!/usr/bin/env python3
"""slowdisk: a FUSE passthrough file system on which every durable request costs a delay.

    python3 bench/slowdisk.py BACKING_DIR MOUNTPOINT [--delay-ms 8] [--stats FILE]

Emulates one spindle with its write cache on: data writes pass straight to BACKING_DIR
(buffered, as a drive's cache takes them), and each durable request (FUSE_FSYNC,
FUSE_FSYNCDIR) holds the mount's one lock for at least the delay (default 8 ms, an HDD cache
flush), doing the real fsync/fdatasync of the backing file inside it. So durable requests of
one mount are serialised, as on one spindle, and each costs max(delay, real sync).

Files are opened without FOPEN_DIRECT_IO so that mmap works (bbolt, hence etcd, needs it).
The kernel then turns an O_DSYNC (or O_SYNC) write into FUSE_WRITE followed by FUSE_FSYNC,
O_DIRECT writes included (generic_write_sync after the direct write), so O_DSYNC writes are
delayed too. O_DIRECT and the sync flags are stripped from the backing open: the backing
write is buffered, and the delayed request makes it durable.

Every 100 ms the counters (FUSE writes, fsyncs, fdatasyncs, fsyncdirs, milliseconds spent
holding the lock) are written as JSON to --stats (atomically, by rename), for a bench to
count durable requests per operation.

Needs fusepy (pip install fusepy) and libfuse2 (Debian: apt-get install fuse libfuse2), and
/dev/fuse with the right to mount (root, or fusermount). Unmount with
`fusermount -u MOUNTPOINT` (or SIGTERM/SIGINT this process).
"""

import argparse
import errno
import json
import os
import threading
import time

from fuse import FUSE, FuseOSError, Operations

STRIP = os.O_DIRECT | os.O_DSYNC | os.O_SYNC


class SlowDisk(Operations):
    use_ns = True  # utimens gets nanoseconds

    def __init__(self, root, delay_s):
        self.root = os.path.realpath(root)
        self.delay_s = delay_s
        # One spindle: every durable request of this mount waits for this lock.
        self.spindle = threading.Lock()
        self.counts_lock = threading.Lock()
        self.counts = {"writes": 0, "write_bytes": 0, "fsync": 0, "fdatasync": 0, "fsyncdir": 0,
                       "held_ms": 0.0, "delay_ms": delay_s * 1e3}

    def _path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def _count(self, key, by=1):
        with self.counts_lock:
            self.counts[key] += by

    def _durable(self, key, sync):
        """Runs `sync` under the spindle lock, taking at least the delay."""
        with self.spindle:
            start = time.monotonic()
            sync()
            rest = self.delay_s - (time.monotonic() - start)
            if rest > 0:
                time.sleep(rest)
            held = (time.monotonic() - start) * 1e3
        with self.counts_lock:
            self.counts[key] += 1
            self.counts["held_ms"] += held

    def snapshot(self):
        with self.counts_lock:
            return dict(self.counts)

    # Metadata.
    def access(self, path, mode):
        if not os.access(self._path(path), mode):
            raise FuseOSError(errno.EACCES)

    def chmod(self, path, mode):
        os.chmod(self._path(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._path(path), uid, gid)

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size",
                "st_uid", "st_blocks", "st_blksize")
        return {k: getattr(st, k) for k in keys}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._path(path))

    def readlink(self, path):
        return os.readlink(self._path(path))

    def mknod(self, path, mode, dev):
        os.mknod(self._path(path), mode, dev)

    def mkdir(self, path, mode):
        os.mkdir(self._path(path), mode)

    def rmdir(self, path):
        os.rmdir(self._path(path))

    def unlink(self, path):
        os.unlink(self._path(path))

    def symlink(self, target, source):
        os.symlink(source, self._path(target))

    def link(self, target, source):
        os.link(self._path(source), self._path(target))

    def rename(self, old, new):
        os.rename(self._path(old), self._path(new))

    def utimens(self, path, times=None):
        if times is None:
            os.utime(self._path(path))
        else:
            os.utime(self._path(path), ns=times)

    def statfs(self, path):
        sv = os.statvfs(self._path(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                "f_flag", "f_frsize", "f_namemax")
        return {k: getattr(sv, k) for k in keys}

    # Files.
    def open(self, path, flags):
        return os.open(self._path(path), flags & ~STRIP)

    def create(self, path, mode, fi=None):
        return os.open(self._path(path), os.O_RDWR | os.O_CREAT, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        n = os.pwrite(fh, data, offset)
        with self.counts_lock:
            self.counts["writes"] += 1
            self.counts["write_bytes"] += n
        return n

    def truncate(self, path, length, fh=None):
        if fh is None:
            os.truncate(self._path(path), length)
        else:
            os.ftruncate(fh, length)

    def flush(self, path, fh):
        # close(2), not a durable request.
        return 0

    def release(self, path, fh):
        os.close(fh)

    def fsync(self, path, datasync, fh):
        if datasync:
            self._durable("fdatasync", lambda: os.fdatasync(fh))
        else:
            self._durable("fsync", lambda: os.fsync(fh))

    def fsyncdir(self, path, datasync, fh):
        def sync():
            fd = os.open(self._path(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        self._durable("fsyncdir", sync)


def dump_stats(fs, path):
    while True:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(fs.snapshot(), f)
        os.rename(tmp, path)
        time.sleep(0.1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("backing")
    p.add_argument("mountpoint")
    p.add_argument("--delay-ms", type=float, default=8.0)
    p.add_argument("--stats", help="write the counters here as JSON every 100 ms")
    a = p.parse_args()
    fs = SlowDisk(a.backing, a.delay_ms / 1e3)
    if a.stats:
        threading.Thread(target=dump_stats, args=(fs, a.stats), daemon=True).start()
    # Threaded (requests of different files overlap, as in a drive's queue), no direct_io
    # (mmap must work), writes up to 128 KiB per request. hard_remove: a file unlinked while
    # open is unlinked at once (its descriptor here stays valid), not renamed to a
    # .fuse_hidden file, which etcd once found in its fresh WAL directory and panicked on.
    FUSE(fs, a.mountpoint, foreground=True, nothreads=False, big_writes=True, max_write=131072,
         fsname="slowdisk", hard_remove=True)


if __name__ == "__main__":
    main()
