#!/usr/bin/env python3
"""strictness.py: sends request-smuggling and framing cases to each HTTP
front candidate and prints a table of what each answered.

    tools/http_front/strictness.py [BIN_DIR (build/tools)]

It starts minimal_evhttp, minimal_strict and minimal_h2o from BIN_DIR on
free loopback ports (those present), sends every case on a new connection,
reads until the server closes or is quiet for 0.5 s, and reports the status
of every response it got and whether the connection was closed. Most cases
carry a second request, GET /smuggled, hidden where a lax parser takes it
for a new request: "200 200" there means the hidden request was served.
"""
import os
import re
import socket
import subprocess
import sys
import time

SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
CANDIDATES = ["minimal_evhttp", "minimal_strict", "minimal_h2o"]


def post(fields, body):
    return b"POST / HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n" + body


def cl(n):
    return b"Content-Length: %d\r\n" % n


# (name, what RFC 9112 wants, bytes)
CASES = [
    ("valid GET (control)", "200", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("valid chunked POST with chunk-ext (control)", "200",
     post(b"Transfer-Encoding: chunked\r\n", b"2;x=1\r\nok\r\n0\r\n\r\n")),
    ("two identical Content-Length (control)", "200 or 400+close",
     post(cl(2) + cl(2), b"ok")),
    ("two different Content-Length", "400+close",
     post(cl(2) + cl(2 + len(SMUGGLED)), b"ok" + SMUGGLED)),
    ("`Content-Length : N` (space before colon)", "400+close",
     post(b"Content-Length : %d\r\n" % len(SMUGGLED), SMUGGLED)),
    ("`Content-Length: +N`", "400+close",
     post(b"Content-Length: +%d\r\n" % len(SMUGGLED), SMUGGLED)),
    ("`Transfer-Encoding: xchunked`", "400+close",
     post(b"Transfer-Encoding: xchunked\r\n", SMUGGLED)),
    ("chunk size `0x2`", "400+close",
     post(b"Transfer-Encoding: chunked\r\n", b"0x2\r\nok\r\n0\r\n\r\n" + SMUGGLED)),
    ("chunk size `2zz`", "400+close",
     post(b"Transfer-Encoding: chunked\r\n", b"2zz\r\nok\r\n0\r\n\r\n" + SMUGGLED)),
    ("Transfer-Encoding + Content-Length", "400+close (or TE only, then close)",
     post(cl(5 + len(SMUGGLED)) + b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n" + SMUGGLED)),
    ("obs-fold continuation line", "400+close (or fold to SP)",
     b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"),
    ("obs-fold on Transfer-Encoding", "400+close",
     post(b"Transfer-Encoding:\r\n chunked\r\n", b"0\r\n\r\n")),
    ("bare LF line ends", "400+close (or accept as CRLF)",
     b"GET / HTTP/1.1\nHost: x\n\n"),
    ("missing Host (HTTP/1.1)", "400+close",
     b"GET / HTTP/1.1\r\n\r\n"),
    ("two Host fields", "400+close",
     b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    ("header section of 20 KB", "431 (or 400)+close",
     b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"),
    ("two Authorization fields", "200, handler sees 2",
     b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n"),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, deadline_s=5.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("port %d never listened" % port)


def exchange(port, data):
    """Returns (statuses, authorization counts, closed)."""
    got, closed = b"", False
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(data)
        s.settimeout(0.5)
        while len(got) < 1 << 20:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            got += chunk
    statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", got)
    auth = re.findall(rb"(?i)x-authorization-count: *(\d+)", got)
    return [s.decode() for s in statuses], [a.decode() for a in auth], closed


def verdict(statuses, auth, closed):
    if not statuses:
        text = "no answer"
    else:
        text = " ".join(statuses)
        if len(statuses) > 1 and statuses[1] == "200":
            text += " (smuggled served)"
    if any(a != "0" for a in auth):
        text += ", sees " + "/".join(auth)
    return text + (", close" if closed else ", open")


def main():
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else "build/tools"
    running = []
    try:
        for name in CANDIDATES:
            path = os.path.join(bin_dir, name)
            if not os.access(path, os.X_OK):
                print("(%s not built: skipped)" % name, file=sys.stderr)
                continue
            port = free_port()
            proc = subprocess.Popen([path, str(port), "1"])
            running.append((name, port, proc))
        for _, port, _ in running:
            wait_listening(port)
        names = [n for n, _, _ in running]
        print("| case | RFC 9112 | " + " | ".join("`%s`" % n for n in names) + " |")
        print("|---|---|" + "---|" * len(names))
        for case, want, data in CASES:
            cells = [verdict(*exchange(port, data)) for _, port, _ in running]
            print("| %s | %s | %s |" % (case, want, " | ".join(cells)))
    finally:
        for _, _, proc in running:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
