#!/usr/bin/env python3
"""Measures what hostile peers make a Lumen head hold (issue 15's before/after).

  bench/hostile_peers.py build/bin/lumen

Starts a head with `lumen start --head --host 0.0.0.0 --node-ip-address 127.0.0.1`
(token required), then, on loopback only:
  1. 20 connections each send a frame header claiming just under 64 MiB and
     nothing else: the head's resident memory before and after.
  2. (against a loopback head, no token) one client sends GetNodes requests
     as fast as the head takes them and never reads: the head's peak resident
     memory over up to 40 s (the default stall deadline is 30 s), how much the client got to send, and whether the head
     disconnected it.
Prints one line per measurement and stops the cluster. Bounded in time.
"""
import os
import re
import socket
import struct
import subprocess
import sys
import time

MAGIC = 0x4C4D4E46


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start(lumen, flags):
    out = subprocess.run([lumen, "start", "--head", "--num-cpus", "1",
                          "--object-store-memory", str(64 << 20)] + flags,
                         capture_output=True, text=True, check=True).stdout
    session = re.search(r"session: (\S+)", out).group(1)
    with open(session + "/cluster.pids") as f:
        head_pid = int(f.readline())
    with open(session + "/head_address") as f:
        port = int(f.read().strip().rsplit(":", 1)[1])
    return head_pid, port


def stop(lumen):
    subprocess.run([lumen, "stop"], capture_output=True)


def main():
    lumen = os.path.abspath(sys.argv[1])
    stop(lumen)
    # 1. Oversize claims against a token-protected head.
    head_pid, port = start(lumen, ["--host", "0.0.0.0", "--node-ip-address", "127.0.0.1"])
    try:
        time.sleep(0.5)  # let the head settle before the baseline (a benchmark, not a test)
        before = rss_kib(head_pid)
        conns = []
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(struct.pack("<II", (64 << 20) - 8, MAGIC))
            conns.append(s)
        time.sleep(1.0)
        after = rss_kib(head_pid)
        closed = 0
        for s in conns:
            s.settimeout(0.2)
            try:
                closed += 1 if s.recv(1) == b"" else 0
            except (socket.timeout, ConnectionResetError):
                closed += 0 if isinstance(sys.exc_info()[1], socket.timeout) else 1
            s.close()
        print(f"oversize_headers_20: head RSS {before} KiB -> {after} KiB "
              f"({closed}/20 closed by the head within 1 s)")
    finally:
        stop(lumen)

    # 2. A client that never reads, against a loopback head.
    head_pid, port = start(lumen, [])
    try:
        time.sleep(0.5)
        before = rss_kib(head_pid)
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        hello, request = frames(lumen, port)
        s.sendall(hello)
        batch = request * 1000
        s.setblocking(False)
        sent = 0
        peak = before
        disconnected = False
        end = time.time() + 40
        offset = 0
        while time.time() < end and not disconnected:
            try:
                n = s.send(batch[offset:])  # resume mid-frame: the stream stays well-formed
                sent += n
                offset = (offset + n) % len(batch)
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                disconnected = True
            peak = max(peak, rss_kib(head_pid))
        print(f"non_reading_client: sent {sent >> 20} MiB of requests in "
              f"{40 - max(0, end - time.time()):.1f} s; head RSS {before} KiB -> peak {peak} KiB; "
              f"disconnected by the head: {disconnected}")
        s.close()
    finally:
        stop(lumen)


def frames(lumen, port):
    """Captures the hello and GetNodes frames `lumen status`-style queries send,
    by serving one fake head on a local port and reading what `lumen list
    nodes` writes to it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    fake = srv.getsockname()[1]
    proc = subprocess.Popen([lumen, "list", "nodes", "--address", f"127.0.0.1:{fake}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, LUMEN_ADDRESS=f"127.0.0.1:{fake}"))
    srv.settimeout(10)
    c, _ = srv.accept()
    c.settimeout(5)
    data = b""
    parsed = []
    while len(parsed) < 2:
        chunk = c.recv(65536)
        if not chunk:
            break
        data += chunk
        while len(data) >= 8:
            length, magic = struct.unpack_from("<II", data)
            if len(data) < 8 + length:
                break
            parsed.append(data[:8 + length])
            data = data[8 + length:]
    c.close()
    srv.close()
    proc.kill()
    proc.wait()
    if len(parsed) < 2:
        raise SystemExit("could not capture the CLI's frames")
    return parsed[0], parsed[1]


if __name__ == "__main__":
    main()
