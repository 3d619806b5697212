"""scan_then_load: torch.load a checkpoint only when ckptscan finds it SAFE.

    from ckptscan_client import scan_then_load, CheckpointScanError
    state = scan_then_load("model.pt", map_location="cpu")          # the local CLI
    state = scan_then_load("model.pt", server="unix:/run/ckptscan/ckptscand.sock")  # a daemon

The bytes torch loads are the bytes that were scanned: the file is read once, into memory, and
hashed. With the CLI (`ckptscan scan --format json --digest sha256 PATH`), the report's sha256
must be that hash, else the file changed between the read and the scan and nothing is loaded.
With a daemon, exactly those bytes are uploaded (ScanClient.scan_bytes), and the digest of the
daemon's report is checked the same way. torch then loads from an io.BytesIO of those bytes,
with weights_only=True, never from the path.

Everything that is not a SAFE report of those bytes raises, and nothing is loaded (fail closed):
  UnsafeCheckpointError   the verdict is SUSPICIOUS, DANGEROUS or ERROR (.verdict, .report)
  DigestMismatchError     the report is of other bytes than the ones read (.expected, .scanned)
  ScanUnavailableError    no scan: no ckptscan binary, a usage error, a timeout, no JSON report,
                          the daemon unreachable or refusing (.code: its gRPC status name)
All three are CheckpointScanError, with .path. torch is imported only here, when called.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
from typing import Any, Optional, Union

from .client import DEFAULT_TIMEOUT, MIN_UPLOAD_BYTES_PER_SECOND, ScanClient

# The CLI's exit codes that come with a report on stdout (docs/cli.md): 0 SAFE, 1 SUSPICIOUS or
# DANGEROUS, 2 ERROR. Anything else (64: usage) is no scan.
_REPORT_EXIT_CODES = (0, 1, 2)
_SCHEMA = "ckptscan.report.v1"


class CheckpointScanError(Exception):
    """scan_then_load did not load the checkpoint. `path` is the file it was asked for."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__("%s: %s" % (path, message))
        self.path = path


class UnsafeCheckpointError(CheckpointScanError):
    """The scan's verdict is not SAFE. `verdict` is "SUSPICIOUS", "DANGEROUS" or "ERROR" (the
    CLI's names), `report` the whole report as a dict (the JSON `ckptscan scan --format json`
    prints, or report_to_dict of the daemon's report)."""

    def __init__(self, path: str, verdict: str, report: dict) -> None:
        super().__init__(path, "verdict %s, not loaded%s" % (verdict, _why(report)))
        self.verdict = verdict
        self.report = report


class DigestMismatchError(CheckpointScanError):
    """The report is not of the bytes that were read: `expected` is the SHA-256 of the bytes in
    memory, `scanned` the report's (lowercase hex; "" when the report has none). The file
    changed between the read and the scan, or the scanner reported on something else."""

    def __init__(self, path: str, expected: str, scanned: str, report: dict) -> None:
        super().__init__(path, "the bytes read have SHA-256 %s, the report says %r: not loaded"
                         % (expected, scanned))
        self.expected = expected
        self.scanned = scanned
        self.report = report


class ScanUnavailableError(CheckpointScanError):
    """The scan could not be made or gave no usable report; nothing was loaded. `code` is the
    gRPC status code's name when a daemon failed the call (ScanClientError.code), else None."""

    def __init__(self, path: str, message: str, code: Optional[str] = None) -> None:
        super().__init__(path, message)
        self.code = code


def _why(report):
    """A short reason for the message: the first finding or error of the first file."""
    try:
        entry = report["files"][0]
        if entry.get("findings"):
            f = entry["findings"][0]
            return " (%s: %s)" % (f.get("rule_id", ""), f.get("global") or f.get("message", ""))
        if entry.get("errors"):
            e = entry["errors"][0]
            return " (error %s: %s)" % (e.get("code", ""), e.get("message", ""))
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return ""


def _read_once(path):
    """The whole file, read once. Only a regular file: a FIFO or a device could give other bytes
    to each reader, and a folder is no checkpoint."""
    # O_NONBLOCK: opening a FIFO does not wait for a writer (it has no effect on regular files).
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        # Checked on the descriptor before it becomes a file object (os.fdopen refuses a folder
        # with an error naming the descriptor, not the path).
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ScanUnavailableError(path, "not a regular file: not scanned, not loaded")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        return f.read()


def _deadline(timeout, size):
    """The scan's time limit: `timeout`, plus the file at 20 MiB/s (ScanClient's allowance for an
    upload, and the CLI reads the file for its digest)."""
    return timeout + size / MIN_UPLOAD_BYTES_PER_SECOND


def _scan_with_cli(path, ckptscan, timeout):
    """`ckptscan scan --format json --digest sha256 -- PATH`: the parsed report and exit code.
    The CLI itself honours $CKPTSCAN_SERVER (it then asks that daemon)."""
    binary = ckptscan or os.environ.get("CKPTSCAN_BIN") or shutil.which("ckptscan")
    if not binary:
        raise ScanUnavailableError(
            path, "no ckptscan binary: pass ckptscan=, set CKPTSCAN_BIN or put ckptscan on PATH")
    # --digest sha256 explicitly: the check below needs the digest, whatever the default.
    # "--" so that a path starting with "-" is not read as an option.
    command = [os.fspath(binary), "scan", "--format", "json", "--digest", "sha256", "--", path]
    try:
        run = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True,
                             timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ScanUnavailableError(path, "%s did not finish within %.0f s"
                                   % (binary, timeout)) from None
    except OSError as e:  # missing, not executable, ...
        raise ScanUnavailableError(path, "cannot run %s: %s" % (binary, e)) from e
    # Quoted in the errors below; said so when empty, not left as a message ending in ": ".
    stderr = run.stderr.decode("utf-8", "replace").strip()[-600:] or "(nothing on stderr)"
    if run.returncode not in _REPORT_EXIT_CODES:
        raise ScanUnavailableError(path, "%s exited %d: %s" % (binary, run.returncode, stderr))
    try:
        report = json.loads(run.stdout)
    except ValueError:
        report = None
    if not isinstance(report, dict) or report.get("schema") != _SCHEMA:
        raise ScanUnavailableError(path, "%s exited %d without a %s report: %s"
                                   % (binary, run.returncode, _SCHEMA, stderr))
    return report, run.returncode


def _scan_with_daemon(path, data, server, timeout):
    """Uploads `data` to the daemon (an address for ScanClient, or a ScanClient) and returns the
    report as the CLI's dict."""
    # pylint: disable=import-outside-toplevel
    from ._stubs import StubError
    from .client import ScanClientError
    from .report import report_to_dict
    own = not isinstance(server, ScanClient)
    try:
        client = ScanClient(server, timeout=timeout) if own else server
    except (StubError, ValueError, OSError) as e:
        raise ScanUnavailableError(path, "cannot reach ckptscand at %s: %s" % (server, e)) from e
    try:
        # skip_digest=False explicitly: the digest check needs it, whatever the default.
        report = client.scan_bytes(path, data, skip_digest=False,
                                   timeout=_deadline(timeout, len(data)))
    except ScanClientError as e:
        raise ScanUnavailableError(path, str(e), code=e.code) from e
    finally:
        if own:
            client.close()
    return report_to_dict(report)


def scan_then_load(path: Union[str, os.PathLike], *,
                   server: Union[str, ScanClient, None] = None,
                   ckptscan: Union[str, os.PathLike, None] = None, map_location: Any = None,
                   timeout: float = DEFAULT_TIMEOUT, **torch_load_kwargs: Any) -> Any:
    """Scans the checkpoint at `path` and, only when it is SAFE, returns
    torch.load(<the scanned bytes>, map_location=map_location, weights_only=True,
    **torch_load_kwargs).

    server: a daemon to scan with: an address as ScanClient takes it ("unix:/path", "local",
        "host:port") or a ScanClient. The bytes are uploaded. Default: the local CLI.
    ckptscan: the ckptscan binary (default $CKPTSCAN_BIN, else `ckptscan` on PATH). The CLI
        scans in its jail, or through the daemon $CKPTSCAN_SERVER names when that is set.
    timeout: seconds for the scan (plus the file's size at 20 MiB/s).

    Raises UnsafeCheckpointError, DigestMismatchError or ScanUnavailableError (all
    CheckpointScanError) instead of loading; OSError when the file cannot be read; ImportError
    when torch is not installed (before anything is scanned). weights_only cannot be turned off.
    """
    if torch_load_kwargs.pop("weights_only", True) is not True:
        raise TypeError("scan_then_load always loads with weights_only=True")
    import torch  # pylint: disable=import-outside-toplevel  (only here: the client needs no torch)

    path = os.fspath(path)
    data = _read_once(path)
    digest = hashlib.sha256(data).hexdigest()

    if server is not None:
        report = _scan_with_daemon(path, data, server, timeout)
        exit_code = None
    else:
        report, exit_code = _scan_with_cli(path, ckptscan, _deadline(timeout, len(data)))

    files = report.get("files") or []
    if not files:
        raise ScanUnavailableError(path, "the report lists no file (skipped: %s)"
                                   % report.get("skipped"))
    entry = files[0]
    verdict = report.get("verdict")
    # Every sign must agree: the report's verdict, its file's, and the CLI's exit code.
    if verdict != "SAFE" or entry.get("verdict") != "SAFE":
        raise UnsafeCheckpointError(path, verdict if verdict != "SAFE" else entry.get("verdict"),
                                    report)
    if exit_code not in (None, 0):
        raise ScanUnavailableError(path, "the CLI exited %d with a SAFE report" % exit_code)
    scanned = str(entry.get("sha256") or "").lower()
    if scanned != digest:
        raise DigestMismatchError(path, digest, scanned, report)

    return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True,
                      **torch_load_kwargs)
