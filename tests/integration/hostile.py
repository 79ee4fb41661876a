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


class ObjectId(bytes):
    """12 bytes to encode as a BSON ObjectId (decode gives an ObjectId as its hex string:
    ObjectId.fromhex(s) turns it back)."""


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
    if isinstance(v, ObjectId):
        return b"\x07" + k + bytes(v)
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
    return _decode_doc(data, 0)


def _decode_doc(data, off):
    return {key: _decode_value(data, t, v, e) for t, key, v, e in raw_elements(data, off)}


def _decode_value(data, t, v, e):
    """The value of type t held in data[v:e]."""
    if t == 0x01:
        return struct.unpack_from("<d", data, v)[0]
    if t in (0x02, 0x0d, 0x0e):
        return data[v + 4:e - 1].decode("utf-8", "replace")
    if t in (0x03, 0x04):
        d = _decode_doc(data, v)
        return [d[k] for k in sorted(d, key=lambda s: int(s) if s.isdigit() else 0)] if t == 0x04 else d
    if t == 0x05:
        return bytes(data[v + 5:e])
    if t == 0x07:
        return data[v:e].hex()
    if t == 0x08:
        return data[v] != 0
    if t in (0x09, 0x11, 0x12):
        return struct.unpack_from("<q", data, v)[0]
    if t == 0x10:
        return struct.unpack_from("<i", data, v)[0]
    return None   # null, undefined, minKey, maxKey, decimal128


def raw_elements(data, off=0):
    """(type, key, value offset, end offset) of each element of the document at off;
    ValueError for a type not walked here."""
    (n,) = struct.unpack_from("<i", data, off)
    end = off + n - 1
    off += 4
    while off < end:
        t = data[off]
        z = data.index(b"\x00", off + 1)
        key = data[off + 1:z].decode("utf-8", "replace")
        v = z + 1
        if t in (0x01, 0x09, 0x11, 0x12):
            size = 8
        elif t == 0x10:
            size = 4
        elif t == 0x08:
            size = 1
        elif t == 0x07:
            size = 12
        elif t in (0x02, 0x0d, 0x0e):
            size = 4 + struct.unpack_from("<i", data, v)[0]
        elif t in (0x03, 0x04):
            size = struct.unpack_from("<i", data, v)[0]
        elif t == 0x05:
            size = 5 + struct.unpack_from("<i", data, v)[0]
        elif t in (0x06, 0x0a, 0x7f, 0xff):
            size = 0
        elif t == 0x13:
            size = 16
        else:
            raise ValueError("bson type 0x%02x not walked here" % t)
        yield t, key, v, v + size
        off = v + size


# ---- raw NNG REQ client ------------------------------------------------------------------

def _hostport(url):
    assert url.startswith("tcp://"), url
    host, port = url[len("tcp://"):].rsplit(":", 1)
    return host, int(port)


def read_exact(sock, n):
    """n bytes from sock; ConnectionError when the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


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

    def __init__(self, url, timeout=5.0, rcvbuf=None, source=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if source:
            # Another loopback address (127.0.0.2, ...): another client to the server's
            # per-client caps, on one machine.
            self.sock.bind((source, 0))
        if rcvbuf:
            # A small receive buffer makes "a client that never reads" bite sooner.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(_hostport(url))
        self.sock.sendall(b"\x00SP\x00\x00\x30\x00\x00")
        hdr = read_exact(self.sock, 8)
        if hdr[:4] != b"\x00SP\x00" or hdr[4:6] != b"\x00\x31":
            raise AssertionError("unexpected SP handshake %r" % hdr)
        self.next_id = 1

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

    def recv_raw(self):
        """Reads one reply; returns (request id, the reply document's bytes)."""
        (n,) = struct.unpack(">Q", read_exact(self.sock, 8))
        payload = read_exact(self.sock, n)
        (rid,) = struct.unpack(">I", payload[:4])
        return rid & 0x7fffffff, payload[4:]

    def recv(self):
        """Reads one reply; returns (request id, decoded document)."""
        rid, raw = self.recv_raw()
        return rid, decode(raw)

    def call_raw(self, body):
        """Sends body (BSON bytes or anything); returns the bytes of the reply to it."""
        rid = self.send_raw(body)
        for _ in range(1000):  # bounded: replies to earlier pipelined requests come first
            got, raw = self.recv_raw()
            if got == rid:
                return raw
        raise AssertionError("no reply to request %d" % rid)

    def call(self, doc):
        return decode(self.call_raw(encode(doc)))

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
