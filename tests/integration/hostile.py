"""
hostile.py — tools for the hostile-client suites (tests/integration/test_hostile_*.py):
a raw NNG client that speaks the SP-over-TCP framing itself (so a test can pipeline
requests without reading, stop half-way through a message, or vanish), a minimal BSON
encoder/decoder (standard library only), and the two checks every hostile case ends
with: the daemon still answers `ping` for another client within a second, and its
resident memory stays under a stated bound.

NNG's TCP transport: after connect, each side sends an 8-byte header
  00 'S' 'P' 00  <protocol: 2 bytes big-endian>  00 00
(REQ v0 = 0x30, REP v0 = 0x31); then every message is an 8-byte big-endian length and
that many bytes. A REQ message starts with a 4-byte request id whose top bit is set;
the REP side echoes it in front of the reply.
"""
import os
import socket
import struct
import time

# ---- minimal BSON ----------------------------------------------------------------------

class Int64(int):
    """An int to encode as BSON int64 even when it fits in 32 bits."""


def _cstring(s):
    b = s.encode("utf-8")
    if b"\x00" in b:
        raise ValueError("key with NUL")
    return b + b"\x00"


def _element(key, v):
    k = _cstring(key)
    if isinstance(v, bool):
        return b"\x08" + k + (b"\x01" if v else b"\x00")
    if isinstance(v, Int64):
        return b"\x12" + k + struct.pack("<q", v)
    if isinstance(v, int):
        if -2**31 <= v < 2**31:
            return b"\x10" + k + struct.pack("<i", v)
        return b"\x12" + k + struct.pack("<q", v)
    if isinstance(v, float):
        return b"\x01" + k + struct.pack("<d", v)
    if isinstance(v, str):
        b = v.encode("utf-8")
        return b"\x02" + k + struct.pack("<i", len(b) + 1) + b + b"\x00"
    if isinstance(v, dict):
        return b"\x03" + k + encode(v)
    if isinstance(v, (list, tuple)):
        return b"\x04" + k + encode({str(i): x for i, x in enumerate(v)})
    if isinstance(v, (bytes, bytearray)):
        return b"\x05" + k + struct.pack("<i", len(v)) + b"\x00" + bytes(v)
    if v is None:
        return b"\x0a" + k
    raise TypeError("cannot encode %r" % type(v))


def encode(doc):
    """dict → BSON bytes (key order kept: the command name must come first)."""
    body = b"".join(_element(k, v) for k, v in doc.items())
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def decode(data):
    """BSON bytes → dict (the types our replies use; others become None)."""
    doc, _ = _decode_doc(data, 0)
    return doc


def _decode_doc(data, off):
    (n,) = struct.unpack_from("<i", data, off)
    end = off + n - 1
    off += 4
    out = {}
    while off < end:
        t = data[off]
        off += 1
        z = data.index(b"\x00", off)
        key = data[off:z].decode("utf-8", "replace")
        off = z + 1
        if t == 0x01:
            (v,) = struct.unpack_from("<d", data, off); off += 8
        elif t in (0x02, 0x0d, 0x0e):
            (ln,) = struct.unpack_from("<i", data, off)
            v = data[off + 4:off + 4 + ln - 1].decode("utf-8", "replace"); off += 4 + ln
        elif t in (0x03, 0x04):
            v, off2 = _decode_doc(data, off)
            if t == 0x04:
                v = [v[k] for k in sorted(v, key=lambda s: int(s) if s.isdigit() else 0)]
            off = off2
        elif t == 0x05:
            (ln,) = struct.unpack_from("<i", data, off)
            v = bytes(data[off + 5:off + 5 + ln]); off += 5 + ln
        elif t == 0x07:
            v = data[off:off + 12].hex(); off += 12
        elif t == 0x08:
            v = data[off] != 0; off += 1
        elif t in (0x09, 0x11, 0x12):
            (v,) = struct.unpack_from("<q", data, off); off += 8
        elif t in (0x0a, 0x7f, 0xff):
            v = None
        elif t == 0x10:
            (v,) = struct.unpack_from("<i", data, off); off += 4
        elif t == 0x13:
            v = None; off += 16
        else:
            raise ValueError("bson type 0x%02x not decoded here" % t)
        out[key] = v
    return out, end + 1


# ---- raw NNG REQ client ------------------------------------------------------------------

def _hostport(url):
    assert url.startswith("tcp://"), url
    host, port = url[len("tcp://"):].rsplit(":", 1)
    return host, int(port)


def closed_by_peer(sock, timeout=5.0):
    """True once the daemon has closed the connection of sock (reads EOF or reset)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if sock.recv(1 << 16) == b"":
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


class RawReq:
    """One TCP connection speaking NNG's REQ side by hand. Nothing is hidden: a test
    decides when to send, what, and whether to ever read."""

    def __init__(self, url, timeout=5.0, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            # A small receive buffer makes "a client that never reads" bite sooner.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(_hostport(url))
        self.sock.sendall(b"\x00SP\x00\x00\x30\x00\x00")
        hdr = self._read_exact(8)
        if hdr[:4] != b"\x00SP\x00" or hdr[4:6] != b"\x00\x31":
            raise AssertionError("unexpected SP handshake %r" % hdr)
        self.next_id = 1

    def _read_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("peer closed")
            buf += chunk
        return bytes(buf)

    def send_raw(self, body, req_id=None):
        """Sends one request (body = BSON bytes or anything); returns its request id."""
        if req_id is None:
            req_id = self.next_id
            self.next_id += 1
        payload = struct.pack(">I", req_id | 0x80000000) + body
        self.sock.sendall(struct.pack(">Q", len(payload)) + payload)
        return req_id

    def send(self, doc):
        return self.send_raw(encode(doc))

    def send_partial(self, claimed_len, data):
        """Announces a message of claimed_len bytes and sends only data of it."""
        self.sock.sendall(struct.pack(">Q", claimed_len) + data)

    def recv(self):
        """Reads one reply; returns (request id, decoded document)."""
        (n,) = struct.unpack(">Q", self._read_exact(8))
        payload = self._read_exact(n)
        (rid,) = struct.unpack(">I", payload[:4])
        return rid & 0x7fffffff, decode(payload[4:])

    def call(self, doc):
        rid = self.send(doc)
        for _ in range(1000):  # bounded: replies to earlier pipelined requests come first
            got, reply = self.recv()
            if got == rid:
                return reply
        raise AssertionError("no reply to request %d" % rid)

    def closed_by_peer(self, timeout=5.0):
        return closed_by_peer(self.sock, timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---- the checks every hostile case ends with ----------------------------------------------

def ping_ms(url, timeout=5.0):
    """Milliseconds for a `ping` on a fresh connection (connect + handshake included)."""
    t0 = time.monotonic()
    c = RawReq(url, timeout=timeout)
    try:
        r = c.call({"ping": 1, "$db": "admin"})
    finally:
        c.close()
    if r.get("ok") != 1:
        raise AssertionError("ping answered %r" % r)
    return (time.monotonic() - t0) * 1000.0


def assert_responsive(proc, within_ms=1000.0, what=""):
    """The daemon answers ping for another client within `within_ms` (default 1 s)."""
    try:
        ms = ping_ms(proc.url, timeout=within_ms / 1000.0 + 0.5)
    except (OSError, ConnectionError) as e:
        raise AssertionError("%s did not answer ping%s: %s" % (proc.name, what and " " + what, e))
    if ms > within_ms:
        raise AssertionError("%s answered ping in %.0f ms%s (bound %.0f ms)" % (
            proc.name, ms, what and " " + what, within_ms))
    return ms


def rss_mb(pid):
    """Resident memory of a process in MiB (from /proc)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS for pid %d" % pid)


def assert_rss_below(proc, mb, what=""):
    if not proc.alive():
        raise AssertionError("%s is not running%s" % (proc.name, what and " " + what))
    got = rss_mb(proc.pid)
    if got > mb:
        raise AssertionError("%s holds %.0f MiB%s (bound %d MiB)" % (
            proc.name, got, what and " " + what, mb))
    return got
