"""
test_webview_http.py — HTTP/1.1 framing on the config server's web port (--http-port), with
raw sockets: what a hand-written or hostile client sends that a browser does not.

- No request to this port has a body, and the server does not read one: a GET with
  Content-Length > 0, or with any Transfer-Encoding, gets 400 with Connection: close and the
  connection is closed (logged), so the body's bytes are never read as a request; another
  method with a body gets its 405, and the connection closed too. (They
  were: `GET / ... Content-Length: N` followed by a body that is itself a request got two
  answers, the second one to the smuggled request.)
- Content-Length: 0 is no body: answered, the connection kept.
- Pipelined keep-alive requests are answered in order, one answer each, as long as the
  burst fits NNG's 8 KiB read buffer (docs/hostile-clients.md: beyond it NNG 1.5 resets
  the connection).
"""
import socket

from lib import *

SMALL = b"GET /api/nothing HTTP/1.1\r\nHost: x\r\n\r\n"   # a 404: a small page, no cluster state


def read_until_closed(sk, timeout=10):
    """Everything the server sends until it closes; AssertionError if it does not close."""
    sk.settimeout(timeout)
    data = b""
    while True:   # bounded: the server closes, or the timeout raises
        try:
            d = sk.recv(65536)
        except socket.timeout:
            raise AssertionError("connection not closed; got %r" % data[-300:])
        if not d:
            return data
        data += d


def read_responses(sk, n, timeout=10):
    """The first n responses (status line + headers + body, by Content-Length)."""
    sk.settimeout(timeout)
    buf, out = b"", []
    while len(out) < n:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode()
            length = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            if len(buf) >= end + 4 + length:
                out.append((head, buf[end + 4:end + 4 + length]))
                buf = buf[end + 4 + length:]
                continue
        d = sk.recv(65536)
        assert d, "closed after %d of %d responses" % (len(out), n)
        buf += d
    return out


def status_of(raw):
    return int(raw.split(b" ", 2)[1])


def http_port(t):
    hport = free_ports(1)[0]
    cfg = t.configsvr(extra=["--http-port", str(hport)])
    return cfg, hport


def send_with_smuggled_body(hport, request_line):
    """request_line with a Content-Length body that is itself a whole GET; returns all the
    server sent until it closed."""
    smuggled = b"GET /style.css HTTP/1.1\r\nHost: x\r\n\r\n"
    sk = socket.create_connection(("127.0.0.1", hport))
    sk.sendall(request_line + b"\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(smuggled) + smuggled)
    data = read_until_closed(sk)
    sk.close()
    return data


@test
def test_get_with_a_body_is_refused_and_closed(t):
    cfg, hport = http_port(t)
    data = send_with_smuggled_body(hport, b"GET /api/nothing HTTP/1.1")
    assert status_of(data) == 400, data[:300]
    assert data.count(b"HTTP/1.1 ") == 1, data[:600]   # the body was not answered as a request
    assert b"Connection: close" in data and b"Content-Length" in data, data[:300]
    wait_until(lambda: "http request refused, connection closed: Content-Length" in cfg.log_text(), 5, "the log line")


@test
def test_other_method_with_a_body_gets_405_and_closed(t):
    cfg, hport = http_port(t)
    data = send_with_smuggled_body(hport, b"POST /api/state HTTP/1.1")
    assert status_of(data) == 405 and data.count(b"HTTP/1.1 ") == 1, data[:600]
    assert b"Allow: GET, HEAD" in data and b"Connection: close" in data, data[:300]


@test
def test_transfer_encoding_is_refused_and_closed(t):
    cfg, hport = http_port(t)
    for te in (b"chunked", b"gzip, chunked", b"identity"):
        sk = socket.create_connection(("127.0.0.1", hport))
        sk.sendall(b"GET /style.css HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + te +
                   b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        data = read_until_closed(sk)
        sk.close()
        assert status_of(data) == 400 and data.count(b"HTTP/1.1 ") == 1, (te, data[:400])
        assert b"Transfer-Encoding" in data, data[:400]
    wait_until(lambda: "http request refused, connection closed: Transfer-Encoding chunked"
               in cfg.log_text(), 5, "the log line")


@test
def test_content_length_zero_is_no_body(t):
    cfg, hport = http_port(t)
    sk = socket.create_connection(("127.0.0.1", hport))
    sk.sendall(b"GET /style.css HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" + SMALL)
    (h1, b1), (h2, _) = read_responses(sk, 2)
    sk.close()
    assert h1.startswith("HTTP/1.1 200") and b1.startswith(b"/*"), h1
    assert h2.startswith("HTTP/1.1 404"), h2


@test
def test_pipelined_requests_answered_in_order(t):
    """200 pipelined requests (7.4 KB, inside NNG's 8 KiB read buffer), alternating two
    paths: 200 answers, each to its own request."""
    cfg, hport = http_port(t)
    css = b"GET /style.css HTTP/1.1\r\nHost: x\r\n\r\n"
    reqs = [SMALL if i % 2 else css for i in range(200)]
    assert len(b"".join(reqs)) < 8192
    sk = socket.create_connection(("127.0.0.1", hport))
    sk.sendall(b"".join(reqs))
    got = read_responses(sk, len(reqs))
    for i, (head, body) in enumerate(got):
        want = "HTTP/1.1 404" if i % 2 else "HTTP/1.1 200"
        assert head.startswith(want), (i, head)
    sk.sendall(SMALL)   # the connection is still usable
    assert read_responses(sk, 1)[0][0].startswith("HTTP/1.1 404")
    sk.close()


if __name__ == "__main__":
    main()
