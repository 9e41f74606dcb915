"""TLS for a socket the load test reads itself (its own epoll, ``recvmsg`` with the kernel's
receive timestamp): the bytes read go in, the plaintext comes out, and what TLS has to send
(the handshake, then the encrypted frames) is handed back for the caller's ``send``. An
``ssl.SSLObject`` over memory buffers, so the arrival timestamps stay the socket's own.

The context verifies (``client.connection.tls_context``: the system's CAs or a CA file), never
``CERT_NONE``: a certificate that does not verify raises ``ssl.SSLCertVerificationError`` from
``received``.
"""

from __future__ import annotations

import ssl


class TlsPipe:
    __slots__ = ("_in", "_out", "_pending", "_tls", "ready")

    def __init__(self, context: ssl.SSLContext, hostname: str) -> None:
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_hostname=hostname)
        self._pending = b""  # plaintext sent before the handshake finished
        self.ready = False

    def start(self) -> bytes:
        """The ClientHello, to send first."""
        self._handshake()
        return self._out.read()

    def send(self, data: bytes) -> bytes:
        """``data`` encrypted (held until the handshake is done: then b"")."""
        if not self.ready:
            self._pending += data
            return b""
        self._tls.write(data)
        return self._out.read()

    def received(self, data: bytes) -> tuple[bytes, bytes]:
        """(plaintext, bytes to send) after ``data`` arrived; b"" plaintext until the handshake
        is done. An SSLError (a certificate that does not verify, a broken record) propagates."""
        self._in.write(data)
        if not self.ready and self._handshake() and self._pending:
            self._tls.write(self._pending)
            self._pending = b""
        plain = []
        while self.ready:
            try:
                chunk = self._tls.read(65_536)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                break
            if not chunk:
                break
            plain.append(chunk)
        return b"".join(plain), self._out.read()

    def _handshake(self) -> bool:
        """Whether the handshake is done now."""
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        self.ready = True
        return True
