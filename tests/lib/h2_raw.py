"""HTTP/2 frames written by hand (RFC 9113, RFC 7541), for tests that speak to ckptscand below
gRPC: the client preface, SETTINGS, HEADERS of a gRPC call, DATA and RST_STREAM. A header block
is encoded once with literal fields that never touch the HPACK dynamic table, so the same bytes
can open any number of streams. Stdlib only.

    block = grpc_headers("/ckptscan.v1.Admin/Status")
    sock.sendall(PREFACE + settings())
    sock.sendall(headers(1, block) + rst_stream(1))
"""
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
CANCEL = 0x8


def frame(kind, flags, stream, payload=b""):
    """One frame: 24-bit length, type, flags, 31-bit stream id, payload."""
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, kind, flags, stream) + payload


def settings(pairs=(), ack=False):
    return frame(SETTINGS, ACK if ack else 0, 0,
                 b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def _literal(name, value):
    """A literal header field without indexing, new name, no Huffman coding (RFC 7541 6.2.2)."""
    def string(s):
        b = s.encode()
        if len(b) >= 127:
            raise ValueError("header strings here are short")
        return bytes([len(b)]) + b
    return b"\x00" + string(name) + string(value)


def grpc_headers(path, authority="localhost"):
    """The header block of a gRPC call to `path` ("/package.Service/Method")."""
    return b"".join(_literal(n, v) for n, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", authority),
        ("content-type", "application/grpc"), ("te", "trailers")))


def headers(stream, block, end_stream=False):
    return frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), stream, block)


def grpc_message(body=b"", end_stream=True):
    """A DATA payload carrying one uncompressed gRPC message."""
    return struct.pack(">BI", 0, len(body)) + body


def data(stream, payload, end_stream=True):
    return frame(DATA, END_STREAM if end_stream else 0, stream, payload)


def rst_stream(stream, code=CANCEL):
    return frame(RST_STREAM, 0, stream, struct.pack(">I", code))


class FrameReader:
    """Splits what a server sends into (type, flags, stream, payload) frames."""

    def __init__(self):
        self._buf = b""

    def feed(self, chunk):
        self._buf += chunk
        out = []
        while len(self._buf) >= 9:
            hi, lo, kind, flags, stream = struct.unpack(">BHBBI", self._buf[:9])
            n = (hi << 16) | lo
            if len(self._buf) < 9 + n:
                break
            out.append((kind, flags, stream & 0x7FFFFFFF, self._buf[9:9 + n]))
            self._buf = self._buf[9 + n:]
        return out
