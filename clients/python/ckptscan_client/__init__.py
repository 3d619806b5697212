"""A Python client of ckptscand, the ckptscan daemon (clients/python/README.md).

    from ckptscan_client import ScanClient, report_to_dict
    client = ScanClient("unix:/run/ckptscan/ckptscand.sock")
    with open("model.pt", "rb") as f:
        report = client.scan_bytes("model.pt", f)     # a ckptscan.v1.Report
    if verdict_name(report.verdict) != "SAFE": ...    # report_to_dict(report): the CLI's JSON

    state = scan_then_load("model.pt", map_location="cpu")  # torch.load only when SAFE (load.py)

An installed package imports the gRPC stubs its build generated from proto/ckptscan/v1; from a
source tree they are compiled on first use instead (_stubs.py).
"""

from .client import (CHUNK_BYTES, ConvertResult, ScanClient, ScanClientError,
                     check_local_socket, default_socket_path)
from .report import error_code_name, report_to_dict, severity_name, verdict_name
from ._stubs import StubError, generate
from .load import (CheckpointScanError, DigestMismatchError, ScanUnavailableError,
                   UnsafeCheckpointError, scan_then_load)

__all__ = ["CHUNK_BYTES", "CheckpointScanError", "ConvertResult", "DigestMismatchError",
           "ScanClient", "ScanClientError", "ScanUnavailableError", "StubError",
           "UnsafeCheckpointError", "check_local_socket", "default_socket_path",
           "error_code_name", "generate", "report_to_dict", "scan_then_load", "severity_name",
           "verdict_name"]
