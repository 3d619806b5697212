"""ScanClient: ckptscand's Scanner and Admin services from Python (proto/ckptscan/v1/scanner.proto).

A client holds one gRPC channel (it connects on first use) and is safe to share between threads,
as a grpc.Channel is. Every call has a deadline; a failed call raises ScanClientError with the
gRPC status code's name and a message that is never empty. A file that could not be verified is
not an error: it is a report with verdict ERROR, as from `ckptscan scan`. The calls return the
typed results of results.py (ScanResult, ConvertOutcome, ...), each over the daemon's message.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from typing import BinaryIO, Iterable, Optional, Union

import grpc

from . import _stubs
from .results import ConvertOutcome, ConvertResult, PublicKey, ScanResult, Status

CHUNK_BYTES = 1 << 20  # the daemon's cap per upload message (UploadChunk.data)
# Default deadlines, as the CLI sets them (clients/remote.cc): the daemon's own job limit and a
# margin for the queue, plus the transfer at a slow rate for uploads.
DEFAULT_TIMEOUT = 90.0
MIN_UPLOAD_BYTES_PER_SECOND = 20 << 20
# The largest message the daemon sends is a 1 MiB data chunk or a report; as the CLI allows.
_MAX_RECEIVE_BYTES = CHUNK_BYTES + (1 << 20)

# What the upload calls take: bytes-like, or a binary file object read to its end.
UploadData = Union[bytes, bytearray, memoryview, BinaryIO]
PemSource = Union[str, os.PathLike, bytes, None]


class ScanClientError(Exception):
    """A call that failed. `code` is the gRPC status code's name ("PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", ... as scanner.proto lists them; "DATA_LOSS" when the daemon's answer
    is malformed), `details` the daemon's message, `target` the address called, `method` the
    call ("ScanPath", ...; None for the checks made before any call).

    `details` is never empty: gRPC lets a status carry no message (a proxy's or a server's
    abort without one, a transport failure), and an error that says only "INTERNAL:" tells a
    reader nothing; then it names the call and the status code itself."""

    def __init__(self, code: str, details: Optional[str], target: str,
                 method: Optional[str] = None):
        if not details:
            details = "%s ended with status %s and no message from the server" % (
                method or "the call", code)
        where = "ckptscand at %s: %s" % (target, method) if method else "ckptscand at " + target
        super().__init__("%s: %s: %s" % (where, code, details))
        self.code = code
        self.details = details
        self.target = target
        self.method = method


def default_socket_path() -> str:
    """The daemon's default socket for this user, as app/paths.h computes it."""
    if os.geteuid() == 0:
        return "/run/ckptscan/ckptscand.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and runtime.startswith("/"):
        return runtime + "/ckptscan/ckptscand.sock"
    return "/tmp/ckptscan-%d/ckptscand.sock" % os.geteuid()


def _check_owned(path, no_other_writers):
    """None when `path` (a directory or socket on the way to the default socket) is no symlink,
    is owned by this user or root, and (with `no_other_writers`) is writable by nobody else;
    else why not. FileNotFoundError when it does not exist."""
    st = os.lstat(path)
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        return "%s is a symlink" % path
    if st.st_uid not in (me, 0):
        return "%s is owned by uid %d, not by you (uid %d) or root" % (path, st.st_uid, me)
    if no_other_writers and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "%s is writable by its group or by others (mode %04o)" % (
            path, stat.S_IMODE(st.st_mode))
    return None


def check_local_socket(path: str) -> None:
    """The checks `ckptscan --server local` makes before it trusts a non-root user's default
    socket (clients/remote.cc, docs/security.md): its directory is no symlink, is owned by this
    user or root and writable by nobody else (so no other user can replace the socket after the
    check); the socket is no symlink and owned by this user or root; and the process listening
    on it (SO_PEERCRED) runs as this user or root. Raises ScanClientError: UNAVAILABLE when no
    socket is there, PERMISSION_DENIED with the reason when it is not to be trusted."""
    target = "unix:" + path
    directory = os.path.dirname(path)
    if not directory or directory == "/":
        raise ScanClientError("INVALID_ARGUMENT", "socket path %s has no directory" % path,
                              target)

    def refused(why):
        return ScanClientError(
            "PERMISSION_DENIED",
            "refusing the daemon socket %s: %s. Another local user may have put it there to "
            "answer in ckptscand's place; remove it and start your own ckptscand, or name a "
            "trusted daemon with ScanClient(\"unix:PATH\")" % (path, why), target)

    def absent():
        return ScanClientError("UNAVAILABLE",
                               "no ckptscand socket at %s (is ckptscand running?)" % path, target)

    for where, no_other_writers in ((directory, True), (path, False)):
        try:
            why = _check_owned(where, no_other_writers)
        except FileNotFoundError:
            raise absent() from None
        if why:
            raise refused(why)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            probe.connect(path)
        except OSError as e:
            raise ScanClientError("UNAVAILABLE", "connect %s: %s (is ckptscand running?)" % (
                path, e.strerror or e), target) from None
        creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        me = os.geteuid()
        if uid not in (me, 0):
            raise refused("the process listening on it runs as uid %d, not as you (uid %d) or "
                          "root" % (uid, me))
    finally:
        probe.close()


def _pem(value, what):
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        data = f.read((1 << 20) + 1)
    if len(data) > 1 << 20:
        raise ValueError("%s %s: over 1 MiB, not a PEM file" % (what, value))
    return data


class ScanClient:
    """A client of one ckptscand.

    address: "unix:/path/to/socket"; "local" or None for the daemon's default socket for this
        user (app/paths.h); or "host:port", always over TLS: tls_ca verifies the server (PEM,
        default the system's CAs), tls_cert and tls_key present a client certificate (mTLS).
        Each TLS argument is a file path or the PEM bytes.
    timeout: the default deadline of a call, in seconds (uploads add their transfer at 20 MiB/s).
    proto_dir, stubs_dir: where the protos are and where their stubs are generated, for a
        source tree only (_stubs.py); an installed package uses the stubs it ships.
    """

    def __init__(self, address: Optional[str] = None, *, tls_ca: PemSource = None,
                 tls_cert: PemSource = None, tls_key: PemSource = None,
                 timeout: float = DEFAULT_TIMEOUT, proto_dir: Optional[str] = None,
                 stubs_dir: Optional[str] = None) -> None:
        if not address or address == "local":
            address = "unix:" + default_socket_path()
            # A non-root user's default socket lives where another user may create it first
            # (/tmp/ckptscan-UID without XDG_RUNTIME_DIR): checked as the CLI checks it, before
            # anything is sent. Its directory then admits no other user, so the socket the
            # channel connects to is the one checked. Root's default is beneath /run.
            if os.geteuid() != 0:
                check_local_socket(address[len("unix:"):])
        self._pb = _stubs.load(proto_dir, stubs_dir)
        options = [("grpc.max_receive_message_length", _MAX_RECEIVE_BYTES)]
        if address.startswith("unix:"):
            if tls_ca is not None or tls_cert is not None or tls_key is not None:
                raise ValueError("tls_* arguments are for host:port servers, not unix:")
            # A local socket: the daemon knows the caller by its uid.
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            if (tls_cert is None) != (tls_key is None):
                raise ValueError("tls_cert and tls_key go together")
            creds = grpc.ssl_channel_credentials(
                root_certificates=_pem(tls_ca, "tls_ca"),
                private_key=_pem(tls_key, "tls_key"),
                certificate_chain=_pem(tls_cert, "tls_cert"))
            self._channel = grpc.secure_channel(address, creds, options=options)
        self.target = address
        self.timeout = timeout
        self._scanner = self._pb.scanner_pb2_grpc.ScannerStub(self._channel)
        self._admin = self._pb.scanner_pb2_grpc.AdminStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ScanClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ Scanner

    def scan_path(self, path: Union[str, os.PathLike], skip_digest: bool = True,
                  timeout: Optional[float] = None, list_tensors: bool = False) -> ScanResult:
        """Scans a file the daemon opens itself: beneath one of its --root directories, absolute
        or relative to the first root. With skip_digest=False the report carries the file's
        SHA-256 (`ckptscan scan --digest sha256`); by default it does not, as the CLI.
        list_tensors=True lists every tensor (FileReport.tensor_list, as `ckptscan scan
        --tensors`). Returns the ScanResult (files[0].path is `path`;
        a sharded checkpoint's index is followed by its shards' reports, and a missing shard is
        an error of the index). A path outside the roots raises ScanClientError with code
        PERMISSION_DENIED."""
        pb = self._pb.scanner_pb2
        request = pb.ScanPathRequest(path=os.fspath(path),
                                     options=pb.ScanOptions(skip_digest=skip_digest,
                                                            list_tensors=list_tensors))
        return ScanResult.from_proto(self._call("ScanPath", self._scanner.ScanPath, request,
                                                self._deadline(timeout, 0)))

    def scan_bytes(self, name: str, data: UploadData, skip_digest: bool = True,
                   chunk: int = CHUNK_BYTES, timeout: Optional[float] = None,
                   list_tensors: bool = False) -> ScanResult:
        """Uploads bytes (bytes-like, or a binary file object read to its end) and scans them.
        skip_digest as for scan_path.
        `name` is what the report calls the file; the daemon never opens it. Returns the
        ScanResult. An uploaded index's shards are not in the upload: each is a
        missing_shard error and the verdict ERROR (scan_path verifies a set). An upload over the
        daemon's cap raises RESOURCE_EXHAUSTED."""
        pb = self._pb.scanner_pb2
        size, chunks = _upload_source(data, chunk)
        header = pb.UploadHeader(name=name, size=size,
                                 options=pb.ScanOptions(skip_digest=skip_digest,
                                                        list_tensors=list_tensors))
        requests = _Requests(pb, header, chunks)
        return ScanResult.from_proto(self._call("ScanUpload", self._scanner.ScanUpload, requests,
                                                self._deadline(timeout, size), requests))

    # pylint: disable-next=redefined-builtin
    def convert_path(self, input: Union[str, os.PathLike], output: Union[str, os.PathLike],
                     dtype: str = "keep", select: str = "", strict: bool = False,
                     replace: bool = False, sign_method: str = "",
                     timeout: Optional[float] = None, allow_dtypes: Iterable[str] = (),
                     cast_quantized: bool = False) -> ConvertOutcome:
        """Converts a file beneath the daemon's roots to safetensors at `output` (beneath a root
        too: a file, or a new/empty directory for a sharded set), signed beside it
        (OUTPUT.sig). `allow_dtypes` is `ckptscan convert --allow-dtype` (only "C64"),
        `cast_quantized` its `--cast-quantized` (with dtype "bf16").
        Returns the ConvertOutcome: `converted`, and the report with
        files[0].conversion when written."""
        pb = self._pb.scanner_pb2
        request = pb.ConvertPathRequest(
            input=os.fspath(input), output=os.fspath(output),
            options=self._convert_options(dtype, select, strict, replace, sign_method,
                                          allow_dtypes, cast_quantized))
        return ConvertOutcome.from_proto(self._call("ConvertPath", self._scanner.ConvertPath,
                                                    request, self._deadline(timeout, 0)))

    def convert_bytes(self, name: str, data: UploadData, dtype: str = "keep", select: str = "",
                      strict: bool = False, sign_method: str = "", chunk: int = CHUNK_BYTES,
                      out: Optional[BinaryIO] = None, timeout: Optional[float] = None,
                      allow_dtypes: Iterable[str] = (),
                      cast_quantized: bool = False) -> ConvertResult:
        """Uploads a checkpoint and converts it. Returns ConvertResult(response, data,
        signature): the ConvertOutcome, then the safetensors bytes and the daemon's signature
        bundle over them when response.converted, else b"". With `out` (a binary file object)
        the bytes are written to it as they arrive and `data` is None; on an error `out` may hold
        a part.

        The daemon's answer is checked: the ConvertResponse comes first, data only after a
        converted response, exactly output_size bytes; else DATA_LOSS."""
        pb = self._pb.scanner_pb2
        size, chunks = _upload_source(data, chunk)
        header = pb.UploadHeader(
            name=name, size=size,
            convert=self._convert_options(dtype, select, strict, False, sign_method,
                                          allow_dtypes, cast_quantized))
        requests = _Requests(pb, header, chunks)
        # Twice the transfer: the input goes up and the output comes back.
        call = self._scanner.ConvertUpload(iter(requests),
                                           timeout=self._deadline(timeout, 2 * size))
        response = None
        parts = []
        received = 0
        try:
            for message in call:
                kind = message.WhichOneof("kind")
                if kind == "response" and response is None:
                    response = message.response
                elif kind == "data" and response is not None and response.converted:
                    if received + len(message.data) > response.output_size:
                        call.cancel()
                        raise self._data_loss("the daemon sent more bytes than it announced (%d)"
                                              % response.output_size)
                    if out is not None:
                        out.write(message.data)
                    else:
                        parts.append(message.data)
                    received += len(message.data)
                else:
                    call.cancel()
                    raise self._data_loss("the daemon's answer is out of order")
        except grpc.RpcError as e:
            raise self._error("ConvertUpload", e, requests) from None
        if response is None:
            raise self._data_loss("the daemon ended the call without an answer")
        outcome = ConvertOutcome.from_proto(response)
        if not response.converted:
            return ConvertResult(outcome, b"", b"")
        if received != response.output_size:
            raise self._data_loss("the daemon announced %d bytes and sent %d"
                                  % (response.output_size, received))
        return ConvertResult(outcome, None if out is not None else b"".join(parts),
                             response.signature)

    # ------------------------------------------------------------------ Admin

    def status(self, timeout: Optional[float] = None) -> Status:
        """The daemon's Status (Admin service: an admin uid or certificate only)."""
        return Status.from_proto(self._call("Status", self._admin.Status,
                                            self._pb.scanner_pb2.StatusRequest(),
                                            self._deadline(timeout, 0)))

    def public_key(self, timeout: Optional[float] = None) -> PublicKey:
        """The daemon's signing key: PublicKey.pem (what `ckptscan verify --pubkey` takes) and
        .hint (Admin service)."""
        return PublicKey.from_proto(self._call("PublicKey", self._admin.PublicKey,
                                               self._pb.scanner_pb2.PublicKeyRequest(),
                                               self._deadline(timeout, 0)))

    # ------------------------------------------------------------------ internals

    def _convert_options(self, dtype, select, strict, replace, sign_method, allow_dtypes=(),
                         cast_quantized=False):
        return self._pb.scanner_pb2.ConvertOptions(
            dtype=dtype or "keep", select=select, strict=strict, replace=replace,
            sign_method=sign_method, allow_dtypes=list(allow_dtypes),
            cast_quantized=cast_quantized)

    def _deadline(self, timeout, transfer_bytes):
        if timeout is not None:
            return timeout
        return self.timeout + transfer_bytes / MIN_UPLOAD_BYTES_PER_SECOND

    def _call(self, name, method, request, timeout, requests=None):
        """Calls `method` (the RPC `name`, for errors) and returns its answer message."""
        try:
            return method(iter(request) if requests is not None else request, timeout=timeout)
        except grpc.RpcError as e:
            raise self._error(name, e, requests) from None

    def _error(self, name, e, requests):
        # Reading the caller's file object failed: that, not the CANCELLED it caused, is the error.
        if requests is not None and requests.failure is not None:
            return requests.failure
        code = e.code() if callable(getattr(e, "code", None)) else None
        details = e.details() if callable(getattr(e, "details", None)) else str(e)
        return ScanClientError(code.name if code is not None else "UNKNOWN", details, self.target,
                               name)

    def _data_loss(self, details):
        return ScanClientError("DATA_LOSS", details, self.target, "ConvertUpload")


def _upload_source(data, chunk):
    """(declared size or 0 if unknown, iterator of byte chunks) for bytes or a file object."""
    if not 0 < chunk <= CHUNK_BYTES:
        raise ValueError("chunk must be 1..%d bytes, not %r" % (CHUNK_BYTES, chunk))
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data).cast("B")
        return len(view), (bytes(view[i:i + chunk]) for i in range(0, len(view), chunk))
    if not hasattr(data, "read"):
        raise TypeError("data must be bytes-like or a binary file object, not %s"
                        % type(data).__name__)
    size = 0
    try:  # a regular file: declare what is left of it, so that the daemon checks it
        st = os.fstat(data.fileno())
        if stat.S_ISREG(st.st_mode):
            size = max(st.st_size - data.tell(), 0)
    except (AttributeError, OSError, ValueError):
        size = 0

    def chunks():
        while True:
            block = data.read(chunk)
            if not block:
                return
            yield bytes(block)
    return size, chunks()


class _Requests:
    """The upload stream: the header, then the data chunks. An exception while reading the
    caller's data is kept (gRPC would only cancel the call) and raised by the client."""

    def __init__(self, pb, header, chunks):
        self._pb = pb
        self._header = header
        self._chunks = chunks
        self.failure = None

    def __iter__(self):
        yield self._pb.UploadChunk(header=self._header)
        try:
            for block in self._chunks:
                yield self._pb.UploadChunk(data=block)
        except Exception as e:  # pylint: disable=broad-except
            self.failure = e
            raise
