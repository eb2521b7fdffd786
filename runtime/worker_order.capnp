# What a node agent sends down a pipe to a worker it forked in advance
# (runtime/preforked_workers.h): the command line and environment that an
# exec'd worker would have been given.
@0xd5a3c9e1f2b84706;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("elastic::runtime::proto");

struct WorkerOrder {
  args @0 :List(Text);         # argv, argv[0] included
  environment @1 :List(Text);  # NAME=VALUE entries: the worker's whole environment
}
