// cifar: trains a pytorch-cifar model on CIFAR-10 or Fashion-MNIST, in this
// process, elastically over worker processes with --workers N / --join
// (trainer/elastic/elastic.h, docs/elastic.md), or as one rank of a fixed-size
// job when mpirun started it (trainer/mpi_mode.h). It is a program of the
// public API (api/elastic.h) whose task is the zoo's (trainer/zoo_task.h).
// Every flag is in docs/flags.md and in --help.
#include "api/elastic.h"
#include "trainer/zoo_task.h"

namespace {

constexpr char kSummary[] =
    "Trains an image classifier of the pytorch-cifar model zoo on CIFAR-10 or Fashion-MNIST,\n"
    "with the training recipe of pytorch-cifar (SGD, momentum 0.9, weight decay 5e-4, cosine\n"
    "schedule over 200 epochs, batch 128) unless the flags say otherwise.\n"
    "Without --workers it trains in this process; --workers N starts a head and N worker\n"
    "processes that train data-parallel and can join (--join HOST:PORT --workers K\n"
    "--token-file F from another shell or machine), leave (SIGTERM) or die (kill -9)\n"
    "between and during epochs. Ctrl-C (SIGINT) or SIGTERM to the driver stops the job at the\n"
    "next epoch boundary with a checkpoint (exit status 3; --resume continues it).\n"
    "Started by mpirun (mpirun -np N cifar [training flags]) it is one of N ranks of a\n"
    "fixed-size data-parallel job over MPI: --batch-size per rank, lr x N, rank 0 prints\n"
    "and checkpoints; the elastic flags are refused there.";

}  // namespace

int main(int argc, char** argv) {
  elastic::Program program;
  program.name = "cifar";
  program.summary = kSummary;
  program.model_from_registry = true;
  program.make_task = elastic::trainer::ZooTaskFromOptions;
  program.title = [](const elastic::TrainOptions& o) {
    return "cifar: " + o.model + " on " + o.dataset;
  };
  return elastic::Main(argc, argv, program);
}
