"""
wireproto.py — a raw MongoDB wire-protocol client for tests (standard library only):
builds OP_MSG / OP_QUERY / OP_COMPRESSED messages by hand (so a test can set any flag,
section, length or checksum, send half a message, or vanish) and reads OP_MSG / OP_REPLY
answers. BSON comes from hostile.py. Also crc32c() (Castagnoli), the checksum OP_MSG's
checksumPresent flag carries.

Message = 16-byte little-endian header {messageLength, requestID, responseTo, opCode}
then the body; OP_MSG body = flagBits uint32, sections (kind 0: one BSON document; kind 1:
int32 size, cstring identifier, documents), optional CRC-32C of everything before it.
"""
import socket
import struct
import time

from hostile import closed_by_peer, decode, encode, read_exact

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013

CHECKSUM = 1
MORE_TO_COME = 2
EXHAUST_ALLOWED = 1 << 16

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def header(length, request_id, opcode, response_to=0):
    return struct.pack("<iiii", length, request_id, response_to, opcode)


def op_msg(body, request_id=1, flags=0, sequences=(), checksum=None):
    """body: dict or BSON bytes. sequences: [(identifier, [docs])]. checksum: None = add a
    correct one when flags has CHECKSUM; an int = send that value instead."""
    b = body if isinstance(body, (bytes, bytearray)) else encode(body)
    sections = b""
    for ident, docs in sequences:
        payload = ident.encode() + b"\x00" + b"".join(
            d if isinstance(d, (bytes, bytearray)) else encode(d) for d in docs)
        sections += b"\x01" + struct.pack("<i", len(payload) + 4) + payload
    sections += b"\x00" + bytes(b)
    rest = struct.pack("<I", flags) + sections
    n = 16 + len(rest) + (4 if flags & CHECKSUM else 0)
    msg = header(n, request_id, OP_MSG) + rest
    if flags & CHECKSUM:
        msg += struct.pack("<I", crc32c(msg) if checksum is None else checksum)
    return msg


def op_query(ns, query, request_id=1, flags=0, skip=0, nret=-1):
    body = struct.pack("<i", flags) + ns.encode() + b"\x00" + struct.pack("<ii", skip, nret) + encode(query)
    return header(16 + len(body), request_id, OP_QUERY) + body


def op_compressed(original_opcode, inner, request_id=1, compressor=2):
    body = struct.pack("<iiB", original_opcode, len(inner), compressor) + inner
    return header(16 + len(body), request_id, OP_COMPRESSED) + body


def hostport(wire_url):
    """'mongodb://127.0.0.1:P' or 'tcp://...' → (host, port)."""
    rest = wire_url.split("://", 1)[1]
    host, port = rest.rsplit(":", 1)
    return host, int(port)


class WireConn:
    """One TCP connection to a wire listener; nothing hidden."""

    def __init__(self, addr, timeout=10.0):
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.next_id = 100

    def send(self, data):
        self.sock.sendall(data)

    def recv(self):
        """One reply: dict with length, request_id, response_to, opcode, flags, doc
        (and checksum for OP_MSG with checksumPresent, cursor_id etc. for OP_REPLY)."""
        h = read_exact(self.sock, 16)
        n, rid, rto, op = struct.unpack("<iiii", h)
        body = read_exact(self.sock, n - 16)
        out = {"length": n, "request_id": rid, "response_to": rto, "opcode": op, "raw": h + body}
        if op == OP_MSG:
            (flags,) = struct.unpack_from("<I", body, 0)
            out["flags"] = flags
            assert body[4] == 0, "reply section kind %d" % body[4]
            out["doc"] = decode(body[5:])
            if flags & CHECKSUM:
                (out["checksum"],) = struct.unpack_from("<I", body, len(body) - 4)
        elif op == OP_REPLY:
            flags, cursor_id, start, nret = struct.unpack_from("<iqii", body, 0)
            out.update(flags=flags, cursor_id=cursor_id, starting_from=start, number_returned=nret)
            out["doc"] = decode(body[20:])
        return out

    def command(self, body, db="admin", **kw):
        """OP_MSG command; returns the reply document."""
        body = dict(body)
        body.setdefault("$db", db)
        self.next_id += 1
        self.send(op_msg(body, request_id=self.next_id, **kw))
        r = self.recv()
        assert r["response_to"] == self.next_id, r
        return r["doc"]

    def closed_by_peer(self, timeout=5.0):
        return closed_by_peer(self.sock, timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
