"""A repository that records where the source tree is (see ckpt.bzl: SOURCE_DIR).

Tests read fixtures from the source tree, as under CMake, because the runfiles tree is made of
symbolic links and ckptscan refuses those by design. Local only: nothing is downloaded.
"""

def _source_dir_impl(rctx):
    root = str(rctx.path(Label("//:WORKSPACE")).dirname)
    rctx.file("BUILD.bazel", "")
    rctx.file("source_dir.bzl", "SOURCE_DIR = %r\n" % root)

source_dir_repository = repository_rule(
    implementation = _source_dir_impl,
    local = True,
)
