"""What ScanClient's calls return: typed results over ckptscand's protobuf messages.

Each result is a frozen dataclass holding the fields a caller usually reads, typed (verdicts as
Verdict, severities as Severity, error codes as ErrorCode), and the message it was read from as
`proto`. A field of the message that a result does not list (a file's tensor_list or
conversion, a report's summary or skipped paths, ...) is read through from `proto`, untyped:
up to 0.1.0 the calls returned the messages themselves, and code written for them keeps
working. report_to_dict takes a ScanResult as it takes a Report.

The enums are written out here, not built from the stubs, so that type checkers and readers see
their members; client_test.py checks them against the protos' numbers and names.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from typing import NamedTuple, Optional, TypeVar

from google.protobuf.message import Message


class _ProtoEnum(enum.IntEnum):
    """An enum of report.proto, named without its prefix ("SAFE" for VERDICT_SAFE).

    An IntEnum: a member equals the proto's number (Verdict.SAFE == report_pb2.VERDICT_SAFE ==
    1), so comparisons written against the numbers keep working. A number the protos this client
    was built with do not know (sent by a newer daemon) reads as UNSPECIFIED, as the CLI prints
    it, rather than failing the whole result; a verdict of UNSPECIFIED is never SAFE."""

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(0)
        return None

    # Printed by name: since Python 3.11 an IntEnum prints as its number, which says nothing
    # in a log line or a message.
    def __str__(self):
        return self.name

    def __format__(self, spec):
        return format(self.name, spec)


class Verdict(_ProtoEnum):
    """ckptscan.v1.Verdict: the CLI's names, the proto's numbers."""
    UNSPECIFIED = 0
    SAFE = 1
    SUSPICIOUS = 2
    DANGEROUS = 3
    ERROR = 4


class Severity(_ProtoEnum):
    """ckptscan.v1.Severity."""
    UNSPECIFIED = 0
    INFO = 1
    LOW = 2
    MEDIUM = 3
    HIGH = 4
    CRITICAL = 5


class ErrorCode(_ProtoEnum):
    """ckptscan.v1.ErrorCode; reports print the name in lowercase (error_code_name)."""
    UNSPECIFIED = 0
    MALFORMED = 1
    UNSUPPORTED = 2
    LIMIT = 3
    IO = 4
    INTERNAL = 5
    TIMEOUT = 6
    SANDBOX = 7
    CANCELLED = 8
    MISSING_SHARD = 9
    DIGEST_MISMATCH = 10
    SERVER = 11
    NOT_PRESENT = 12


class _Result:
    """A typed result over one message (see the module's doc).

    from_proto reads each field of the dataclass from the message field of the same name (or
    the one its metadata names as "proto_name", or through its "read" function), converted by
    the field's type: an enum from its number, a result from its message, a tuple item by item.
    One reader for every result, so a result is only its list of typed fields."""

    @classmethod
    def from_proto(cls: type[_R], m: Message) -> _R:
        hints = _hints(cls)
        values = {}
        for field in dataclasses.fields(cls):
            if field.name == "proto":
                values["proto"] = m
            elif "read" in field.metadata:
                values[field.name] = field.metadata["read"](m)
            else:
                raw = getattr(m, field.metadata.get("proto_name", field.name))
                values[field.name] = _convert(hints[field.name], raw)
        return cls(**values)

    def __getattr__(self, name):
        # Fields a result does not list are read from its message. Only called when the normal
        # lookup failed. Private and special names are not read through: copy and pickle probe
        # for them before `proto` is set.
        if name.startswith("_") or name == "proto":
            raise AttributeError(name)
        try:
            proto = object.__getattribute__(self, "proto")
        except AttributeError:
            raise AttributeError(name) from None
        try:
            return getattr(proto, name)
        except AttributeError:
            raise AttributeError("%s (%s) has no field %r" % (
                type(self).__name__, proto.DESCRIPTOR.full_name, name)) from None


_R = TypeVar("_R", bound=_Result)


@functools.lru_cache(maxsize=None)
def _hints(cls):
    """The evaluated field types of a result class (the annotations are strings here)."""
    return typing.get_type_hints(cls)


def _convert(hint, raw):
    if isinstance(hint, type) and issubclass(hint, _Result):
        return hint.from_proto(raw)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(raw)
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return tuple(_convert(item, r) for r in raw)
    return raw


def _proto_field():
    # Not in the repr: a whole report's message would drown the typed fields.
    return dataclasses.field(repr=False)


def _counts(field, key, convert):
    """A reader of a repeated (key, count) message field as a dict, counts of equal keys summed
    (two numbers this client does not know both read as Verdict.UNSPECIFIED)."""
    def read(m):
        out = {}
        for entry in getattr(m, field):
            k = convert(getattr(entry, key))
            out[k] = out.get(k, 0) + entry.count
        return out
    return dataclasses.field(metadata={"read": read})


_result = dataclasses.dataclass(frozen=True)


@_result
class Location(_Result):
    """Where something was seen (ckptscan.v1.Location)."""
    member: str
    offset: int
    opcode: str
    pickle_index: int
    nested_depth: int
    proto: Message = _proto_field()


@_result
class Finding(_Result):
    """A finding (ckptscan.v1.Finding). `global_name` is the proto's `global`, a keyword in
    Python (getattr(finding, "global") reads it too)."""
    rule_id: str
    severity: Severity
    category: str
    global_name: str = dataclasses.field(metadata={"proto_name": "global"})
    call: str
    location: Location
    message: str
    verdict: Verdict
    proto: Message = _proto_field()


@_result
class FileError(_Result):
    """Why a file could not be verified (ckptscan.v1.ScanError); `limit_name` and
    `limit_value` are set when `code` is ErrorCode.LIMIT."""
    code: ErrorCode
    message: str
    location: Location
    limit_name: str
    limit_value: int
    proto: Message = _proto_field()


@_result
class FileResult(_Result):
    """One file's report (ckptscan.v1.FileReport). Read through: tensors, pickles, globals,
    conversion, shards, expected_sha256, code_files, tensor_list."""
    path: str
    verdict: Verdict
    format: str
    kind: str
    size: int
    sha256: str
    findings: tuple[Finding, ...]
    errors: tuple[FileError, ...]
    proto: Message = _proto_field()


@_result
class ScanResult(_Result):
    """A scan's report (ckptscan.v1.Report): `verdict` is the worst of the files'. Read
    through: summary, skipped."""
    verdict: Verdict
    files: tuple[FileResult, ...]
    schema: str
    scanner_version: str
    rules_version: str
    proto: Message = _proto_field()


@_result
class ConvertOutcome(_Result):
    """A conversion's answer (ckptscan.v1.ConvertResponse): `report` is the input's scan, with
    files[0].conversion when `converted`; `error` says why not, when not."""
    converted: bool
    error: str
    output_size: int
    signature: bytes
    report: ScanResult
    proto: Message = _proto_field()


class ConvertResult(NamedTuple):
    """convert_bytes' answer: the daemon's ConvertOutcome; the safetensors bytes (b"" when not
    converted, None when they were written to `out`); the OMS signature bundle (JSON bytes, b""
    when not converted)."""
    response: ConvertOutcome
    data: Optional[bytes]
    signature: bytes


@_result
class Status(_Result):
    """The daemon's state (ckptscan.v1.StatusResponse). `jobs_done` counts the files judged
    since start by verdict, `worker_failures` the jailed workers' failures by kind."""
    scanner_version: str
    rules_version: str
    uptime_seconds: int
    jobs_running: int
    jobs_queued: int
    max_running: int
    max_queued: int
    jobs_done: dict[Verdict, int] = _counts("jobs_done", "verdict", Verdict)
    worker_failures: dict[str, int] = _counts("worker_failures", "kind", str)
    jobs_refused: int
    draining: bool
    roots: tuple[str, ...]
    signer: str
    jail_layers: str
    proto: Message = _proto_field()


@_result
class PublicKey(_Result):
    """The daemon's signing key (ckptscan.v1.PublicKeyResponse): `pem` is what `ckptscan
    verify --pubkey` takes, `hint` the bundles' public-key hint."""
    pem: str
    hint: str
    proto: Message = _proto_field()
