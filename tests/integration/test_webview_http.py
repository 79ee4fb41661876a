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
- Pipelined keep-alive requests are answered in order, one answer each: 300 in one write
  (11 KB; NNG's HTTP server, which served this port before, answered 153 of them and reset
  the connection, logging nothing). Past MS_HTTP_PIPELINE_MAX requests waiting behind an
  unanswered one, the queued ones are answered in order and the connection is closed,
  logged; a client that sends requests and never reads is cut after --http-idle-ms,
  logged, while others are served.
- Framing: a request trickled a few bytes per write is answered; an oversize request line
  gets 400, oversize or too many header fields 431, a bad version 505, malformed lines
  400, each with Connection: close and a logged reason; HTTP/1.0 closes unless it asks for
  keep-alive; Connection: close is honoured; HEAD answers carry no body.
"""
import os
import socket
import time

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


CSS = b"GET /style.css HTTP/1.1\r\nHost: x\r\n\r\n"
HTML = b"GET /index.html HTTP/1.1\r\nHost: x\r\nUser-Agent: test\r\n\r\n"
# one of three requests, each with an answer told apart by status and content type
KINDS = [(CSS, "HTTP/1.1 200", "text/css"), (SMALL, "HTTP/1.1 404", "application/json"),
         (HTML, "HTTP/1.1 200", "text/html")]


def check_answers(got, first=0):
    """got[i] answers request first+i of the KINDS cycle."""
    for i, (head, body) in enumerate(got):
        _, status, ctype = KINDS[(first + i) % 3]
        assert head.startswith(status) and ("Content-Type: " + ctype) in head, (first + i, head)
        if ctype == "application/json":
            assert b'"status" : 404' in body, (first + i, body)


def closes_logged(cfg, reason):
    return [ln for ln in cfg.log_text().splitlines() if "http connection closed" in ln and "reason=" + reason in ln]


@test
def test_300_pipelined_requests_in_one_write_answered_in_order(t):
    """300 requests (11 KB, well over the 8 KiB NNG read in one go) sent at once on one
    connection: 300 answers, each to its own request, then the connection still serves."""
    cfg, hport = http_port(t)
    burst = b"".join(KINDS[i % 3][0] for i in range(300))
    assert len(burst) > 8192 + 2048, len(burst)
    sk = socket.create_connection(("127.0.0.1", hport))
    sk.sendall(burst)
    check_answers(read_responses(sk, 300))
    sk.sendall(SMALL)
    assert read_responses(sk, 1)[0][0].startswith("HTTP/1.1 404")
    sk.close()
    wait_until(lambda: closes_logged(cfg, "clientClosed"), 5, "the close logged")
    assert len(closes_logged(cfg, "")) == 1, closes_logged(cfg, "")   # no other close


@test
def test_pipelining_past_the_cap_answers_the_queued_then_closes_logged(t):
    """The first /api/cluster of a fresh server waits for a build, so the requests after it
    queue behind it: past MS_HTTP_PIPELINE_MAX (32) the queued ones are answered, in order,
    and the connection is closed with a logged reason."""
    cfg, hport = http_port(t)
    req = b"GET /api/cluster HTTP/1.1\r\nHost: x\r\n\r\n"
    sk = socket.create_connection(("127.0.0.1", hport))
    sk.sendall(req * 300)
    got, data = [], read_until_closed(sk, timeout=15)
    sk.close()
    while data:   # bounded: each turn takes one answer off data
        end = data.index(b"\r\n\r\n")
        head = data[:end].decode()
        length = int(head.split("Content-Length: ")[1].split("\r\n")[0])
        got.append((head, data[end + 4:end + 4 + length]))
        data = data[end + 4 + length:]
    print("  %d of 300 answered before the close" % len(got), flush=True)
    assert 1 <= len(got) < 300, len(got)
    for head, body in got:
        assert head.startswith("HTTP/1.1 200") and b'"shards"' in body, (head, body[:200])
    assert "Connection: close" in got[-1][0], got[-1][0]
    wait_until(lambda: closes_logged(cfg, "pipelineCap"), 5, "the close logged")
    assert "http pipelined requests over the cap" in cfg.log_text()


@test
def test_client_that_never_reads_is_cut_after_the_deadline(t):
    """600 requests for /app.js (9 MB of answers) from a client that reads nothing: the
    server stops reading requests once its unsent answers reach the cap, cuts the connection
    --http-idle-ms after they started to back up (logged), and serves others meanwhile."""
    hport = free_ports(1)[0]
    cfg = t.configsvr(extra=["--http-port", str(hport), "--http-idle-ms", "1500"])
    sk = socket.socket()
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)   # no growing receive window
    sk.connect(("127.0.0.1", hport))
    sk.settimeout(10)
    sk.sendall(b"GET /app.js HTTP/1.1\r\nHost: x\r\n\r\n" * 600)
    t0 = time.monotonic()
    other = socket.create_connection(("127.0.0.1", hport))
    for i in range(3):   # another client is served while the first backs up
        other.sendall(KINDS[i][0])
        check_answers(read_responses(other, 1), i)
    other.close()
    wait_until(lambda: closes_logged(cfg, "sendTimeout"), 10, "the silent reader cut")
    print("  cut after %.1f s" % (time.monotonic() - t0), flush=True)
    line = closes_logged(cfg, "sendTimeout")[0]
    assert "unsent=" in line and "unsent=0 " not in line, line
    sk.close()


@test
def test_request_trickled_across_many_writes_is_answered(t):
    """Two requests sent 1 to 3 bytes per write (no delay on the socket), boundaries in the
    middle of lines and of the CRLFs: both answered, in order."""
    cfg, hport = http_port(t)
    sk = socket.create_connection(("127.0.0.1", hport))
    sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data, i = HTML + CSS, 0
    while i < len(data):   # bounded: i grows each turn
        n = 1 + i % 3
        sk.sendall(data[i:i + n])
        i += n
        time.sleep(0.002)
    got = read_responses(sk, 2)
    sk.close()
    assert got[0][0].startswith("HTTP/1.1 200") and "text/html" in got[0][0], got[0][0]
    assert got[1][0].startswith("HTTP/1.1 200") and "text/css" in got[1][0], got[1][0]


def one_refusal(hport, raw):
    """Sends raw, expects one answer with Connection: close, then the close: (status, data)."""
    sk = socket.create_connection(("127.0.0.1", hport))
    try:
        sk.sendall(raw)
    except OSError:
        pass
    data = read_until_closed(sk)
    sk.close()
    assert data.count(b"HTTP/1.1 ") == 1 and b"Connection: close" in data, data[:400]
    return status_of(data), data


@test
def test_oversize_and_malformed_heads_are_refused_and_closed(t):
    cfg, hport = http_port(t)
    cases = [
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 400, b"request line longer"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", 431, b"header field line"),
        (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(101)) + b"\r\n", 431,
         b"more than 100 header fields"),
        (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1000) for i in range(20)) + b"\r\n",
         431, b"request head larger than 16384"),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, b"not supported"),
        (b"GARBAGE\r\n\r\n", 400, b"malformed request line"),
        (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, b"malformed header field"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, b"malformed header field"),
        (b"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400, b"control character"),
    ]
    for raw, want, text in cases:
        st, data = one_refusal(hport, raw)
        assert st == want and text in data, (raw[:60], data[:300])
    wait_until(lambda: len(closes_logged(cfg, "headerTooLarge")) == 3, 5, "431 closes logged")
    wait_until(lambda: len(closes_logged(cfg, "badRequest")) == 6, 5, "400 closes logged")
    # a head of 16 KiB that never ends: 431 once the buffer is full, not a wait
    st, _ = one_refusal(hport, b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 3500)
    assert st == 431, st


@test
def test_connection_close_http10_and_head(t):
    cfg, hport = http_port(t)
    for raw in (b"GET /style.css HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + SMALL,
                b"GET /style.css HTTP/1.0\r\n\r\n" + SMALL):
        sk = socket.create_connection(("127.0.0.1", hport))
        sk.sendall(raw)
        data = read_until_closed(sk)   # the second request is not answered
        sk.close()
        assert status_of(data) == 200 and data.count(b"HTTP/1.1 ") == 1, data[:300]
        assert b"Connection: close" in data, data[:300]
    # HTTP/1.0 with keep-alive: kept, said back; HEAD: the GET's length, no body
    sk = socket.create_connection(("127.0.0.1", hport))
    sk.sendall(b"HEAD /app.js HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + SMALL)
    sk.settimeout(10)
    data = b""
    while data.count(b"\r\n\r\n") < 2 or not data.endswith(b"}"):   # bounded: recv times out
        d = sk.recv(65536)
        assert d, data
        data += d
    sk.close()
    head, rest = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and b"Connection: keep-alive" in head, head
    assert b"Content-Length: %d" % len(open_asset("app.js")) in head, head
    assert rest.startswith(b"HTTP/1.1 404"), rest[:100]   # no body between the two
    wait_until(lambda: len(closes_logged(cfg, "connectionClose")) == 2, 5, "the closes logged")


def open_asset(name):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "web", name), "rb") as f:
        return f.read()


if __name__ == "__main__":
    main()
