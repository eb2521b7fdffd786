"""CUDA and NCCL from /usr/local/cuda, when they are there.

NCCL and CUDA are not Debian packages. Where `path` holds cuda_runtime.h and
nccl.h, @<name>//:headers declares its headers and @<name>//:defs.bzl says
HAVE_CUDA = True; elsewhere (a fresh Debian machine, the container image's
build stage) the headers library is empty, HAVE_CUDA is False, and the NCCL
backend is built as one that says it is missing (collectives/BUILD.bazel).
"""

def _cuda_repository_impl(ctx):
    include = ctx.path(ctx.attr.path + "/include")
    have = include.get_child("cuda_runtime.h").exists and include.get_child("nccl.h").exists
    ctx.file("defs.bzl", "HAVE_CUDA = %s\nCUDA_HOME = %r\n" % (have, ctx.attr.path))
    if have:
        ctx.symlink(include, "include")
        headers = """glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh",
                 "include/**/*.hxx", "include/nv/**"])"""
        includes = '["include"]'
    else:
        headers = "[]"
        includes = "[]"
    ctx.file("BUILD.bazel", """
exports_files(["defs.bzl"])

cc_library(
    name = "headers",
    # include/nv/ holds CUDA's extension-less headers (<nv/target>, from cuda_fp16.h).
    hdrs = {headers},
    includes = {includes},
    visibility = ["//visibility:public"],
)
""".format(headers = headers, includes = includes))

cuda_repository = repository_rule(
    implementation = _cuda_repository_impl,
    attrs = {"path": attr.string(mandatory = True)},
    local = True,
)
