"""libtorch_repository: the CUDA LibTorch a user gives with --repo_env=LIBTORCH_HOME=DIR.

DIR is an unpacked official libtorch archive (or a pip torch's torch/ folder)
holding include/ and lib/. Only --config=cuda builds use it; without
LIBTORCH_HOME such a build stops with a message that says what to set.
"""

_MISSING = """
cc_library(
    name = "torch",
    srcs = ["libtorch_home_missing.cc"],
    visibility = ["//visibility:public"],
)
"""

_FOUND = """
cc_library(
    name = "torch",
    hdrs = glob(["include/**/*.h", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    linkopts = [
        "-L{lib}",
        "-Wl,-rpath,{lib}",
        "-Wl,--no-as-needed",
        "-ltorch_cuda",
        "-lc10_cuda",
        "-Wl,--as-needed",
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
    ],
    visibility = ["//visibility:public"],
)
"""

def _libtorch_repository_impl(ctx):
    home = ctx.os.environ.get("LIBTORCH_HOME", "")
    if not home:
        ctx.file("libtorch_home_missing.cc", "#error \"--config=cuda needs a CUDA LibTorch: " +
                                             "add --repo_env=LIBTORCH_HOME=/path/to/libtorch " +
                                             "(docs/operations.md)\"\n")
        ctx.file("BUILD", _MISSING)
        return
    if not ctx.path(home + "/include/torch").exists or not ctx.path(home + "/lib").exists:
        fail("LIBTORCH_HOME=%s has no include/torch or lib/: give an unpacked libtorch" % home)
    ctx.symlink(home + "/include", "include")
    ctx.file("BUILD", _FOUND.format(lib = home + "/lib"))

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["LIBTORCH_HOME"],
)
