"""A Python client of ckptscand, the ckptscan daemon (clients/python/README.md).

    from ckptscan_client import ScanClient, Verdict, report_to_dict
    client = ScanClient("unix:/run/ckptscan/ckptscand.sock")
    with open("model.pt", "rb") as f:
        report = client.scan_bytes("model.pt", f)     # a ScanResult (results.py)
    if report.verdict is not Verdict.SAFE: ...        # report_to_dict(report): the CLI's JSON

    state = scan_then_load("model.pt", map_location="cpu")  # torch.load only when SAFE (load.py)

An installed package imports the gRPC stubs its build generated from proto/ckptscan/v1; from a
source tree they are compiled on first use instead (_stubs.py).
"""

from .client import (CHUNK_BYTES, ScanClient, ScanClientError, check_local_socket,
                     default_socket_path)
from .report import error_code_name, report_to_dict, severity_name, verdict_name
from .results import (ConvertOutcome, ConvertResult, ErrorCode, FileError, FileResult, Finding,
                      Location, PublicKey, ScanResult, Severity, Status, Verdict)
from ._stubs import StubError, generate
from .load import (CheckpointScanError, DigestMismatchError, ScanUnavailableError,
                   UnsafeCheckpointError, scan_then_load)

__all__ = ["CHUNK_BYTES", "CheckpointScanError", "ConvertOutcome", "ConvertResult",
           "DigestMismatchError", "ErrorCode", "FileError", "FileResult", "Finding", "Location",
           "PublicKey", "ScanClient", "ScanClientError", "ScanResult", "ScanUnavailableError",
           "Severity", "Status", "StubError", "UnsafeCheckpointError", "Verdict",
           "check_local_socket", "default_socket_path", "error_code_name", "generate",
           "report_to_dict", "scan_then_load", "severity_name", "verdict_name"]
