"""strangers.py - hostile clients without the secret, for tests.

usage: strangers.py HOST:PORT COUNT SECONDS [INTERVAL]

Holds COUNT connections to an omnifs peer port for SECONDS.  Each sends a
frame header that announces a HELLO body and then dribbles one byte
every INTERVAL seconds (default 0.2: never silent for long), and is opened
again as soon as the daemon closes it, as a determined attacker would.
At the end it prints one line: `connections N closed_by_peer M
longest_held_s S` (S: the longest any one connection stayed open).
PROTO_VERSION in the environment (tests/lib.sh sets it from
transport/proto.h) is the protocol version the headers claim.
"""
import os
import selectors
import socket
import struct
import sys
import time

MAGIC, PT_HELLO = 0x4D4F, 1
BODY = 200


def usage():
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    sys.exit(2)


def header(version):
    # magic, version, type, body length (as long as a HELLO may be), reqid
    return struct.pack("<HBBIQ", MAGIC, version, PT_HELLO, BODY, 0)


def main(argv):
    if len(argv) < 4 or argv[1] in ("-h", "--help"):
        usage()
    if not os.environ.get("PROTO_VERSION", "").isdigit():
        sys.exit("strangers.py: set PROTO_VERSION to the peer protocol's version")
    version = int(os.environ["PROTO_VERSION"])
    host, port = argv[1].rsplit(":", 1)
    count, secs = int(argv[2]), float(argv[3])
    every = float(argv[4]) if len(argv) > 4 else 0.2
    sel = selectors.DefaultSelector()
    opened = closed = 0
    longest = 0.0
    born = {}

    def connect():
        nonlocal opened
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((host, int(port)))
        sel.register(s, selectors.EVENT_READ)
        born[s] = time.monotonic()
        opened += 1
        return s

    socks = [connect() for _ in range(count)]
    sent = {}
    end = time.monotonic() + secs
    while time.monotonic() < end:
        for key, _ in sel.select(timeout=every):
            s = key.fileobj
            try:
                gone = not s.recv(4096)
            except (BlockingIOError, InterruptedError):
                gone = False
            except OSError:
                gone = True
            if gone:                    # the daemon closed it: back at once
                longest = max(longest, time.monotonic() - born.pop(s))
                sel.unregister(s)
                s.close()
                closed += 1
                socks[socks.index(s)] = connect()
        for s in socks:                 # the header first, then a byte at a time
            try:
                n = sent.get(s, 0)
                out = header(version) if n == 0 else b"x"
                if n < 16 + BODY - 1 and s.send(out) > 0:
                    sent[s] = n + len(out)
            except (BlockingIOError, InterruptedError, OSError):
                pass
    for s in socks:
        longest = max(longest, time.monotonic() - born[s])
        s.close()
    print("connections %d closed_by_peer %d longest_held_s %.1f" % (opened, closed, longest))


if __name__ == "__main__":
    main(sys.argv)
