"""report_to_dict: a Report message as the dict `ckptscan scan --format json` prints.

The dict is made by google.protobuf.json_format (proto field names kept, defaults included) and
then brought to the CLI's rendering (clients/report_format.cc, docs/report.md):

  json_format                            ckptscan scan --format json
  "VERDICT_SAFE", "SEVERITY_CRITICAL"    "SAFE", "CRITICAL" (the enum's short name)
  "ERROR_CODE_MISSING_SHARD"             "missing_shard" (the short name, lowercase)
  64-bit integers as strings ("1024")    JSON numbers (1024)
  every field, in field-number order     the keys docs/report.md lists as "always", the others
                                         only when set (Location.pickle_index/nested_depth when
                                         non-zero, ScanError.limit_name/limit_value with a limit
                                         name, FileReport.shards/expected_sha256/code_files when
                                         non-empty,
                                         conversion when present), in the CLI's order

report_to_dict takes the ScanResult a ScanClient call returns, or the Report message itself.
So json.dumps(report_to_dict(r), indent=2, ensure_ascii=False) + "\n" is the CLI's text for the
same report. One deliberate difference: a conversion's `signature` and `signer`, which the CLI's
JSON does not print, are kept (when set) at the end of the `conversion` object.
"""

from __future__ import annotations

from typing import Union

from google.protobuf import json_format
from google.protobuf.message import Message

from .results import ScanResult

# Key order of each object, as the CLI prints it (optional keys included where they go).
_LOCATION = ("member", "offset", "opcode", "pickle_index", "nested_depth")
_FINDING = ("rule_id", "severity", "category", "global", "call", "location", "message",
            "verdict")
_ERROR = ("code", "message", "location", "limit_name", "limit_value")
_TENSORS = ("count", "bytes", "storages", "shared", "unsupported")
_CONVERSION = ("output", "tensors", "aliases", "bytes", "dtype", "dtypes", "not_written",
               "not_written_total", "signature", "signer")
_DTYPE_CONVERSION = ("source", "written", "how", "tensors")
_FILE = ("path", "sha256", "size", "format", "kind", "verdict", "findings", "errors", "tensors",
         "pickles", "globals", "shards", "expected_sha256", "code_files", "tensor_list",
         "conversion")
_CODE_FILE = ("name", "bytes", "sha256")
_TENSOR_INFO = ("name", "dtype", "shape", "bytes", "storage", "shared", "note")
_SUMMARY = ("files", "safe", "suspicious", "dangerous", "error", "skipped", "kinds")
_SKIPPED = ("path", "reason")
_REPORT = ("schema", "scanner_version", "rules_version", "verdict", "files", "summary",
           "skipped")


def verdict_name(value: Union[int, str]) -> str:
    """The CLI's name of a Verdict, given as a Verdict, a number or the proto name: 1 -> "SAFE"
    (clients/verdict.cc)."""
    return _short(value, "VERDICT_")


def severity_name(value: Union[int, str]) -> str:
    """The CLI's name of a Severity (a number or the proto name): 5 -> "CRITICAL"."""
    return _short(value, "SEVERITY_")


def error_code_name(value: Union[int, str]) -> str:
    """The reports' name of an ErrorCode (a number or the proto name): 9 -> "missing_shard",
    as app::ErrorCodeName: the enum is the one table; "unspecified" for 0 or an unknown value."""
    return _short(value, "ERROR_CODE_").lower()


def _short(value, prefix):
    """"VERDICT_SAFE" -> "SAFE". Numbers are named through the enum; json_format gives a number
    for a value the protos do not know, which the CLI prints as "UNSPECIFIED", as here."""
    if not isinstance(value, str):
        from . import _stubs  # pylint: disable=import-outside-toplevel
        enum = {"VERDICT_": "Verdict", "SEVERITY_": "Severity", "ERROR_CODE_": "ErrorCode"}[prefix]
        values = _stubs.load().report_pb2.DESCRIPTOR.enum_types_by_name[enum].values_by_number
        value = values[value].name if value in values else ""
    if value.startswith(prefix) and value != prefix + "UNSPECIFIED":
        return value[len(prefix):]
    return "UNSPECIFIED"


def _ordered(d, keys):
    return {k: d[k] for k in keys if k in d}


def _int(d, *keys):
    for k in keys:
        d[k] = int(d.get(k, 0))


def _location(d):
    d = dict(d or {})
    d.setdefault("member", "")
    d.setdefault("opcode", "")
    _int(d, "offset", "pickle_index", "nested_depth")
    for k in ("pickle_index", "nested_depth"):
        if d[k] == 0:
            del d[k]
    return _ordered(d, _LOCATION)


def _finding(d):
    d = dict(d)
    d["severity"] = _short(d.get("severity", ""), "SEVERITY_")
    d["verdict"] = _short(d.get("verdict", ""), "VERDICT_")
    d["location"] = _location(d.get("location"))
    return _ordered(d, _FINDING)


def _error(d):
    d = dict(d)
    d["code"] = error_code_name(d.get("code", ""))
    d["location"] = _location(d.get("location"))
    if d.get("limit_name"):
        _int(d, "limit_value")
    else:
        d.pop("limit_name", None)
        d.pop("limit_value", None)
    return _ordered(d, _ERROR)


def _conversion(d):
    d = dict(d)
    _int(d, "tensors", "aliases", "bytes", "not_written_total")
    d["not_written"] = [{"path": n.get("path", ""), "type": n.get("type", "")}
                        for n in d.get("not_written", [])]
    d["dtypes"] = [_ordered({"source": u.get("source", ""), "written": u.get("written", ""),
                             "how": u.get("how", ""), "tensors": int(u.get("tensors", 0))},
                            _DTYPE_CONVERSION) for u in d.get("dtypes", [])]
    for k in ("signature", "signer"):
        if not d.get(k):
            d.pop(k, None)
    return _ordered(d, _CONVERSION)


def _file(d):
    d = dict(d)
    _int(d, "size", "pickles", "globals")
    d["verdict"] = _short(d.get("verdict", ""), "VERDICT_")
    d["findings"] = [_finding(x) for x in d.get("findings", [])]
    d["errors"] = [_error(x) for x in d.get("errors", [])]
    t = dict(d.get("tensors") or {})
    _int(t, *_TENSORS)
    d["tensors"] = _ordered(t, _TENSORS)
    if not d.get("shards"):
        d.pop("shards", None)
    if not d.get("expected_sha256"):
        d.pop("expected_sha256", None)
    if d.get("code_files"):
        d["code_files"] = [_ordered({"name": c.get("name", ""), "bytes": int(c.get("bytes", 0)),
                                     "sha256": c.get("sha256", "")}, _CODE_FILE)
                           for c in d["code_files"]]
    else:
        d.pop("code_files", None)
    if d.get("tensor_list"):  # only when asked for (ScanOptions.list_tensors)
        d["tensor_list"] = [_ordered({"name": t.get("name", ""), "dtype": t.get("dtype", ""),
                                      "shape": [int(x) for x in t.get("shape", [])],
                                      "bytes": int(t.get("bytes", 0)),
                                      "storage": int(t.get("storage", 0)),
                                      "shared": bool(t.get("shared", False)),
                                      "note": t.get("note", "")}, _TENSOR_INFO)
                            for t in d["tensor_list"]]
    else:
        d.pop("tensor_list", None)
    if "conversion" in d:
        d["conversion"] = _conversion(d["conversion"])
    return _ordered(d, _FILE)


def report_to_dict(report: Union[ScanResult, Message]) -> dict:
    """A scan's report (the ScanResult of scan_path, scan_bytes or a ConvertOutcome, or a
    ckptscan.v1.Report message) as the dict `ckptscan scan --format json` prints for it. Only
    for reports."""
    if isinstance(report, ScanResult):
        report = report.proto
    if report.DESCRIPTOR.full_name != "ckptscan.v1.Report":
        raise TypeError("report_to_dict takes a ckptscan.v1.Report, not %s"
                        % report.DESCRIPTOR.full_name)
    d = json_format.MessageToDict(report, preserving_proto_field_name=True,
                                  including_default_value_fields=True)
    d["verdict"] = _short(d.get("verdict", ""), "VERDICT_")
    d["files"] = [_file(f) for f in d.get("files", [])]
    summary = dict(d.get("summary") or {})
    _int(summary, *_SUMMARY[:-1])
    summary["kinds"] = {k: int(v) for k, v in sorted((summary.get("kinds") or {}).items(),
                                                      key=lambda kv: kv[0].encode("utf-8"))}
    d["summary"] = _ordered(summary, _SUMMARY)
    d["skipped"] = [_ordered({"path": x.get("path", ""), "reason": x.get("reason", "")}, _SKIPPED)
                    for x in d.get("skipped", [])]
    return _ordered(d, _REPORT)
