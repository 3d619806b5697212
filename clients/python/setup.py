"""The build hook of ckptscan_client (the metadata is in pyproject.toml).

The client's gRPC stubs are generated from proto/ckptscan/v1/*.proto. A wheel (and so every
pip install) carries them: build_py copies the protos into the package, as
ckptscan_client/proto/ckptscan/v1/*.proto, and compiles those copies into
ckptscan_client/_generated/ckptscan/v1/*_pb2*.py with the generator _stubs.py picks (protoc with
grpc_python_plugin, else grpc_tools). The installed client imports those and needs no compiler
at run time; the build fails, saying what to install, when there is no generator, rather than
make a wheel that would need one later. Only a source tree compiles the stubs at run time
(_stubs.py). Protos and stubs are written in the build folder (wheel) or, protos only, in the
release tree (sdist), never in git: the protos live once, in proto/.

Where the protos are copied from, the first that has them:
  1. $CKPTSCAN_PROTO_DIR (a `proto/` folder, as for the client);
  2. ckptscan_client/proto inside this folder: a build from an sdist, which carries the copy
     (the source tree never has one);
  3. the repository's proto/ (clients/python/../../proto): a build from the source tree.

The build and egg-info folders go to a temporary folder that is removed at exit, so that
`pip install ./clients/python` (pip builds in the source folder) leaves nothing behind in the
source tree. A --build-base or --egg-base given to setup.py still wins.
"""

import atexit
import glob
import importlib.util
import os
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_SUBDIR = os.path.join("ckptscan", "v1")
PACKAGED_PROTO_DIR = os.path.join("ckptscan_client", "proto")
STUBS_MODULE = os.path.join(HERE, "ckptscan_client", "_stubs.py")


def proto_source():
    """The folder holding the ckptscan/v1/*.proto files to package."""
    candidates = [os.environ.get("CKPTSCAN_PROTO_DIR"),
                  os.path.join(HERE, PACKAGED_PROTO_DIR),
                  os.path.join(HERE, "..", "..", "proto")]
    for c in candidates:
        if c and glob.glob(os.path.join(c, PROTO_SUBDIR, "*.proto")):
            return os.path.realpath(os.path.join(c, PROTO_SUBDIR))
    raise SystemExit("setup.py: no ckptscan/v1/*.proto in $CKPTSCAN_PROTO_DIR, %s or %s"
                     % (candidates[1], os.path.normpath(candidates[2])))


def copy_protos(root):
    """Copies the protos into ROOT/ckptscan_client/proto/ckptscan/v1; returns the copies."""
    source = proto_source()
    target = os.path.join(root, PACKAGED_PROTO_DIR, PROTO_SUBDIR)
    if os.path.realpath(target) == source:  # building from an sdist in place: already there
        return []
    os.makedirs(target, exist_ok=True)
    copies = []
    for path in sorted(glob.glob(os.path.join(source, "*.proto"))):
        out = os.path.join(target, os.path.basename(path))
        shutil.copyfile(path, out)
        copies.append(out)
    return copies


def load_stubs_module():
    """ckptscan_client/_stubs.py, loaded by its path: the build uses the client's own generator
    choice and command, and importing the package itself would need grpc (its __init__)."""
    spec = importlib.util.spec_from_file_location("_ckptscan_client_build_stubs", STUBS_MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generate_stubs(root):
    """Compiles ROOT/ckptscan_client/proto into ROOT/ckptscan_client/<_stubs.SHIPPED_SUBDIR>;
    returns the files written. Exits with what to install when no generator is found."""
    stubs = load_stubs_module()
    package = os.path.join(root, "ckptscan_client")
    out = os.path.join(package, stubs.SHIPPED_SUBDIR)
    # A --build-base kept from an earlier build may hold stubs of older protos.
    shutil.rmtree(out, ignore_errors=True)
    try:
        stubs.generate(out, proto_dir=os.path.join(package, "proto"))
    except stubs.StubError as e:
        raise SystemExit("setup.py: cannot generate the gRPC stubs the package ships: %s" % e)
    return sorted(glob.glob(os.path.join(out, "**", "*.py"), recursive=True))


class BuildPyWithProtos(build_py):
    """build_py, then the protos and the stubs compiled from them beside the modules (the wheel
    packs the whole build folder)."""

    def initialize_options(self):
        super().initialize_options()
        self.generated = []

    def run(self):
        super().run()
        self.generated = copy_protos(self.build_lib) + generate_stubs(self.build_lib)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + self.generated


class SdistWithProtos(sdist):
    """sdist, with the protos in the release tree (a build from the sdist has no proto/)."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        copy_protos(base_dir)


def private_build_folder():
    """A temporary folder for build/ and the egg-info, removed when setup.py exits."""
    folder = tempfile.mkdtemp(prefix="ckptscan-client-build-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


_build = private_build_folder()
setup(
    # Named here, not found: this folder also holds the tests (*_test.py) and setup.py.
    packages=["ckptscan_client"],
    # PEP 561: the package's type hints are for type checkers of the code that uses it.
    package_data={"ckptscan_client": ["py.typed"]},
    cmdclass={"build_py": BuildPyWithProtos, "sdist": SdistWithProtos},
    options={"build": {"build_base": os.path.join(_build, "build")},
             "egg_info": {"egg_base": _build}},
)
