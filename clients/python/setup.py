"""The build hook of ckptscan_client (the metadata is in pyproject.toml).

The client compiles its gRPC stubs from proto/ckptscan/v1/*.proto (_stubs.py). In the source tree
it reads them from the repository's proto/; an installed copy has no source tree, so the protos
are copied into the package when it is built, as ckptscan_client/proto/ckptscan/v1/*.proto,
where _stubs.find_proto_dir looks first. The copy is made in the build folder (wheel) or in the
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
import os
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_SUBDIR = os.path.join("ckptscan", "v1")
PACKAGED_PROTO_DIR = os.path.join("ckptscan_client", "proto")


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


class BuildPyWithProtos(build_py):
    """build_py, then the protos beside the modules (the wheel packs the whole build folder)."""

    def initialize_options(self):
        super().initialize_options()
        self.proto_copies = []

    def run(self):
        super().run()
        self.proto_copies = copy_protos(self.build_lib)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + self.proto_copies


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
    cmdclass={"build_py": BuildPyWithProtos, "sdist": SdistWithProtos},
    options={"build": {"build_base": os.path.join(_build, "build")},
             "egg_info": {"egg_base": _build}},
)
