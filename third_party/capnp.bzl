"""capnp_cc_library: compiles Cap'n Proto schemas to C++ with the system `capnp` tool."""

def capnp_cc_library(name, srcs, deps = [], visibility = None):
    """A cc_library holding the C++ code generated from `srcs` (*.capnp files of this package).

    Include the generated header as "<package>/<file>.capnp.h".
    """
    native.genrule(
        name = name + "_capnp_gen",
        srcs = srcs,
        outs = [s + ".h" for s in srcs] + [s + ".c++" for s in srcs],
        cmd = "capnp compile --import-path=/usr/include -oc++:$(GENDIR) $(SRCS)",
        message = "Compiling Cap'n Proto schema",
    )
    native.cc_library(
        name = name,
        srcs = [s + ".c++" for s in srcs],
        hdrs = [s + ".h" for s in srcs],
        deps = deps + ["//third_party:capnp"],
        visibility = visibility,
    )
