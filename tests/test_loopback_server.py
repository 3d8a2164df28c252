"""The loopback model servers of the bench and the tests take a burst of connections."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

from lab.drills.loopback import LoopbackHTTPServer

BURST = 200


class _Answer(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def _exchange(sock: socket.socket, deadline: float) -> bytes:
    """The whole answer on ``sock``, or b"" when it fails or ``deadline`` passes."""
    data = b""
    try:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        while chunk := sock.recv(4096):
            data += chunk
    except OSError:
        return b""
    return data


def test_a_burst_of_connections_waits_in_the_accept_queue_and_every_request_is_answered():
    # Every client connects and sends its request before the server accepts any: with
    # the default queue of 5 the kernel drops or resets most of them (a step's
    # "Connection error" and a retried model request). One deadline bounds a failure.
    httpd = LoopbackHTTPServer(("127.0.0.1", 0), _Answer)
    deadline = time.monotonic() + 30
    clients = []
    try:
        for _ in range(BURST):
            try:
                sock = socket.create_connection(
                    httpd.server_address, timeout=max(0.01, min(1, deadline - time.monotonic()))
                )
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            except OSError:
                continue
            clients.append(sock)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        answers = [_exchange(sock, deadline) for sock in clients]
        answered = sum(a.startswith(b"HTTP/1.0 200") and a.endswith(b"ok") for a in answers)
        assert answered == BURST
    finally:
        for sock in clients:
            sock.close()
        httpd.shutdown()
        httpd.server_close()
