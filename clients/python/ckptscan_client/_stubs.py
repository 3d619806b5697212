"""The gRPC stubs of proto/ckptscan/v1: the ones shipped in the package, else generated.

No generated code is committed. An installed package carries stubs that setup.py generated
when the wheel was built (ckptscan_client/_generated/ckptscan/v1/*_pb2*.py, from the protos it
packages beside them), so an installed client needs no protobuf compiler at run time: these
are used whenever they are there. A source tree has none: there, and only there, the stubs are
compiled from the .proto files the first time they are needed, in a directory named by a
digest of the protos and of the generator, so an edited proto or another compiler gets stubs
of its own and stale ones are never loaded. Stubs.source says which was used.

Generators (for setup.py's build and for the source-tree fallback), the first found wins:
  1. `protoc` with `grpc_python_plugin` (Debian: protobuf-compiler, protobuf-compiler-grpc),
     the same protobuf and gRPC versions as Debian's python3-protobuf and python3-grpcio;
  2. `python3 -m grpc_tools.protoc` (Debian: python3-grpc-tools; its bundled protoc is older,
     3.5.1 in Debian 12, and its output still loads under python3-protobuf 3.21).

Where the protos are (fallback only): `proto_dir` if given, else $CKPTSCAN_PROTO_DIR, else a
`proto/` directory inside the package (setup.py copies proto/ckptscan/v1/*.proto there too),
else the source tree this package sits in (clients/python/ckptscan_client -> proto/).

Where generated stubs go (fallback only): `cache_dir` if given, else $CKPTSCAN_STUBS_DIR, else
$XDG_CACHE_HOME/ckptscan/python-stubs (default ~/.cache/...). The stub files are code that is
run on import, so the directories are created private (0700) and a cache root owned by another
user is refused.

This module imports nothing outside the standard library at import time: setup.py loads it
by path to generate the shipped stubs, before grpc or protobuf need to be importable.
"""

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

PROTOS = ("ckptscan/v1/report.proto", "ckptscan/v1/scanner.proto")
_MODULES = ("report_pb2", "scanner_pb2", "scanner_pb2_grpc")
# Where setup.py puts the stubs it generates, inside the built package (the generated code
# imports itself as ckptscan.v1.*, so this folder, not the package, goes on sys.path).
SHIPPED_SUBDIR = "_generated"

_loaded = None


class StubError(RuntimeError):
    """The stubs could not be generated or loaded (no protos, no compiler, a compiler error)."""


def find_proto_dir(proto_dir=None):
    candidates = [proto_dir, os.environ.get("CKPTSCAN_PROTO_DIR")]
    here = os.path.dirname(os.path.abspath(__file__))
    # The copy packaged with an installed package first: it is the one the package was built
    # with, and three folders up from site-packages is no source tree. The source tree has no
    # such copy (setup.py writes it into the build folder only).
    candidates.append(os.path.join(here, "proto"))
    candidates.append(os.path.join(here, "..", "..", "..", "proto"))
    for c in candidates:
        if c and all(os.path.isfile(os.path.join(c, p)) for p in PROTOS):
            return os.path.realpath(c)
    raise StubError(
        "cannot find %s: pass proto_dir or set CKPTSCAN_PROTO_DIR to the ckptscan source's proto/"
        % " and ".join(PROTOS))


def _generator():
    """The command prefix that compiles protos to Python message and gRPC modules, and a string
    naming the generator and its version (part of the cache key)."""
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin")
    if protoc and plugin:
        version = subprocess.run([protoc, "--version"], capture_output=True, text=True,
                                 check=False).stdout.strip()
        return ([protoc, "--plugin=protoc-gen-grpc_python=" + plugin],
                "%s+grpc_python_plugin:%s" % (version, os.path.realpath(plugin)))
    try:
        import grpc_tools  # noqa: F401  (only to know it is there)
    except ImportError:
        raise StubError(
            "no protobuf compiler for the stubs (no protoc with grpc_python_plugin on PATH, no "
            "grpc_tools module): install Debian's protobuf-compiler and protobuf-compiler-grpc "
            "or python3-grpc-tools") from None
    return ([sys.executable, "-m", "grpc_tools.protoc"],
            "grpc_tools:" + os.path.dirname(grpc_tools.__file__))


def _cache_key(proto_dir, generator_id):
    h = hashlib.sha256()
    h.update(generator_id.encode())
    for p in PROTOS:
        with open(os.path.join(proto_dir, p), "rb") as f:
            data = f.read()
        h.update(b"\0%s\0%d\0" % (p.encode(), len(data)))
        h.update(data)
    return h.hexdigest()[:24]


def _private_dir(path):
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.geteuid():
        raise StubError("%s belongs to uid %d, not to us: refusing to load code from it"
                        % (path, st.st_uid))
    return path


def default_cache_dir():
    if os.environ.get("CKPTSCAN_STUBS_DIR"):
        return os.environ["CKPTSCAN_STUBS_DIR"]
    base = os.environ.get("XDG_CACHE_HOME")
    if not base or not base.startswith("/"):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ckptscan", "python-stubs")


def generate(out_dir, proto_dir=None, command=None):
    """Compiles the protos into out_dir (ckptscan/v1/*_pb2*.py). `command` overrides the
    generator (a command prefix taking -I, --python_out, --grpc_python_out)."""
    proto_dir = find_proto_dir(proto_dir)
    cmd = command or _generator()[0]
    os.makedirs(out_dir, exist_ok=True)
    run = subprocess.run(
        cmd + ["-I" + proto_dir, "--python_out=" + out_dir, "--grpc_python_out=" + out_dir]
        + [os.path.join(proto_dir, p) for p in PROTOS],
        capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise StubError("%s failed (exit %d): %s" % (" ".join(cmd), run.returncode,
                                                       run.stderr.strip()))
    for m in _MODULES:
        if not os.path.isfile(os.path.join(out_dir, "ckptscan", "v1", m + ".py")):
            raise StubError("%s did not write ckptscan/v1/%s.py" % (" ".join(cmd), m))
    return out_dir


def stubs_dir(proto_dir=None, cache_dir=None):
    """The directory holding current stubs for the protos, generating them if needed."""
    proto_dir = find_proto_dir(proto_dir)
    command, generator_id = _generator()
    root = _private_dir(cache_dir or default_cache_dir())
    final = os.path.join(root, _cache_key(proto_dir, generator_id))
    if os.path.isdir(final):
        return final
    # Generated beside, then renamed into place: a concurrent first use sees whole stubs or none.
    tmp = tempfile.mkdtemp(prefix=".gen-", dir=root)
    try:
        generate(tmp, proto_dir, command)
        try:
            os.rename(tmp, final)
        except OSError:
            if not os.path.isdir(final):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def shipped_dir():
    """The folder of the stubs this copy of the package was built with, or None when it has
    none (it runs from a source tree, or was copied by hand)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), SHIPPED_SUBDIR)
    if all(os.path.isfile(os.path.join(folder, "ckptscan", "v1", m + ".py")) for m in _MODULES):
        return folder
    return None


class Stubs:
    """The generated modules: report_pb2, scanner_pb2, scanner_pb2_grpc. `source` is "shipped"
    (built into the installed package) or "generated" (compiled at run time into `directory`,
    the source-tree fallback)."""

    def __init__(self, directory, modules, source):
        self.directory = directory
        self.source = source
        self.report_pb2, self.scanner_pb2, self.scanner_pb2_grpc = modules


def load(proto_dir=None, cache_dir=None):
    """Imports the stubs; later calls return the same modules.

    The shipped stubs when the package has them (proto_dir and cache_dir are then unused: the
    client's code is written against the protos it was built with); else they are generated
    once from the protos (see the module's doc), which needs a protobuf compiler.

    The modules are imported as ckptscan.v1.* (the protos' own package path, which the generated
    code imports itself by), from the stub directory put first on sys.path.
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    directory = shipped_dir()
    source = "shipped"
    if directory is None:
        source = "generated"
        try:
            directory = stubs_dir(proto_dir, cache_dir)
        except StubError as e:
            # The other way out, beside what the cause says (a compiler to install, the
            # protos to point at): an installed package, which needs neither.
            raise StubError(
                "%s has no shipped gRPC stubs (a source tree, not an installed package) and "
                "cannot generate them: %s. Installing the package (pip install clients/python, "
                "see its README.md) builds the stubs into it"
                % (os.path.dirname(os.path.abspath(__file__)), e)) from e
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        modules = [importlib.import_module("ckptscan.v1." + m) for m in _MODULES]
    except ImportError as e:
        raise StubError("cannot import the stubs from %s: %s" % (directory, e)) from e
    for m in modules:
        origin = os.path.realpath(m.__file__)
        if not origin.startswith(os.path.realpath(directory) + os.sep):
            raise StubError("ckptscan.v1 was already imported from %s, not from %s"
                            % (origin, directory))
    _loaded = Stubs(directory, modules, source)
    return _loaded
