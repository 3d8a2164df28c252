"""An HTTP server on loopback that takes a burst of connections at once (the bench's
and the tests' OpenAI-compatible model servers)."""

from http.server import ThreadingHTTPServer


class LoopbackHTTPServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` (one daemon thread per connection) whose listening
    socket queues up to 1,024 connections not yet accepted.

    A worker's slots connect at once. The queue is sized when the socket starts
    listening, inside the constructor, so it must be a class attribute: set on the
    instance afterwards it does nothing, and with the default of 5 the kernel resets the
    connections past the queue, which the client sees as a failed request
    (``ModelConnectionError``) and the step retries, without the server ever seeing it."""

    request_queue_size = 1024
    daemon_threads = True
