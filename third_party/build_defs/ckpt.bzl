"""Bazel twins of the CMake helpers in CMakeLists.txt (docs/bazel.md)."""

load("@ckpt_source_dir//:source_dir.bzl", _SOURCE_DIR = "SOURCE_DIR")

# Tests read fixtures from the source tree, as under CMake: the runfiles tree holds symbolic
# links, which ckptscan refuses by design (a model must not point outside itself). The data deps
# still declare the fixtures, so a changed fixture re-runs its tests. The absolute path comes from
# a local repository rule (source_dir.bzl, in WORKSPACE).
SOURCE_DIR = _SOURCE_DIR

def ckpt_test(name, srcs, deps = [], data = [], local_defines = [], copts = [], **kwargs):
    """One gtest binary, like CMake's ckpt_test(NAME SOURCES ... LIBS ...).

    Links gtest, gmock and gtest_main; defines CKPT_SOURCE_DIR, the root that tests resolve
    fixture paths against.

    Linked statically against our own libraries, as CMake links its static libraries into each
    test and as the binaries are linked (the system libraries stay shared, as everywhere in
    this build), instead of cc_test's default of one .so per library.
    """
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + ["//third_party/system:gtest_main"],
        data = data,
        local_defines = ['CKPT_SOURCE_DIR=\\"%s\\"' % SOURCE_DIR] + local_defines,
        copts = copts,
        linkstatic = True,
        **kwargs
    )

def ckpt_sh_test(name, script, args = [], data = [], **kwargs):
    """A shell test script run by bash, like CMake's add_test(NAME n COMMAND bash script ...).

    sh_test wants an executable source file, and CMake runs the scripts through `bash`, so they
    need not be executable in git: the script is copied into an executable output. sh_test runs
    it as <package>/<name> in the runfiles tree, so helpers the script finds through
    BASH_SOURCE (clients/test_lib.sh) must be in `data` and the test must be declared in the
    script's own package.
    """
    out = name + "_bin/" + script.split("/")[-1]
    native.genrule(
        name = name + "_script",
        srcs = [script],
        outs = [out],
        cmd = "cp $< $@ && chmod +x $@",
        testonly = True,
    )
    native.sh_test(
        name = name,
        srcs = [out],
        args = args,
        data = data,
        **kwargs
    )

def ckpt_py_test(name, script, args = [], data = [], **kwargs):
    """A python script test, like CMake's add_test(NAME n COMMAND /usr/bin/python3 script ...).

    Debian's /usr/bin/python3 runs the script from the runfiles tree (Bazel 4's py_test stub
    wants a `python` on PATH, which Debian does not have).
    """
    path = native.package_name() + "/" + script
    native.genrule(
        name = name + "_script",
        outs = [name + "_bin/run.sh"],
        cmd = "printf '#!/bin/sh\\nexec /usr/bin/python3 %s \"$$@\"\\n' > $@ && chmod +x $@" % path,
        testonly = True,
    )
    native.sh_test(
        name = name,
        srcs = [name + "_bin/run.sh"],
        args = args,
        data = data + [script],
        **kwargs
    )
