"""A repository rule that exposes a directory of system headers as a cc_library.

Headers under /usr/include are known to the toolchain; headers elsewhere (the
LibTorch C++ API, Open MPI, CUDA) must be declared so the sandbox sees them.
"""

def system_headers(name, path):
    native.new_local_repository(
        name = name,
        path = path,
        build_file_content = """
cc_library(
    name = "headers",
    # nv/ holds CUDA's extension-less headers (<nv/target>, included by cuda_fp16.h).
    hdrs = glob(["**/*.h", "**/*.hpp", "**/*.cuh", "**/*.hxx", "nv/**"]),
    includes = ["."],
    visibility = ["//visibility:public"],
)
""",
    )
