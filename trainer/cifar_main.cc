// cifar: trains a pytorch-cifar model on CIFAR-10 or Fashion-MNIST, in this
// process, elastically over worker processes with --workers N / --join
// (trainer/elastic/elastic.h, docs/elastic.md), or as one rank of a fixed-size
// job when mpirun started it (trainer/mpi_mode.h). Every flag is in
// docs/flags.md and in --help.
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "collectives/mpi_communicator.h"
#include "models/registry.h"
#include "trainer/allocator.h"
#include "trainer/checkpoint.h"
#include "trainer/elastic/elastic.h"
#include "trainer/elastic/elastic_options.h"
#include "trainer/flags.h"
#include "trainer/mpi_mode.h"
#include "trainer/train_options.h"
#include "trainer/trainer.h"

namespace {

using elastic::trainer::FlagError;
using elastic::trainer::FlagSet;
using elastic::trainer::TrainOptions;

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

int ListModels() {
  std::printf("%-18s %14s  %-14s %s\n", "model", "parameters", "memory format", "architecture");
  for (const elastic::models::ModelInfo& info : elastic::models::AvailableModels()) {
    const int64_t count =
        elastic::models::CountParameters(*elastic::models::CreateModel(info.name, 10));
    std::printf("%-18s %14lld  %-14s %s\n", info.name.c_str(), static_cast<long long>(count),
                elastic::models::PrefersChannelsLast(info.name) ? "channels-last" : "contiguous",
                info.paper.c_str());
  }
  std::printf(
      "(parameter counts for 10 classes; memory format: what --memory-format=auto picks, "
      "measured per model)\n");
  return 0;
}

void PrintPerClass(const elastic::trainer::EvalResult& eval,
                   const std::vector<std::string>& class_names) {
  std::printf("test accuracy by class:");
  for (size_t c = 0; c < class_names.size(); ++c)
    std::printf(" %s %.1f%%", class_names[c].c_str(), 100 * eval.ClassAccuracy(c));
  std::printf("\n");
}

void PrintDone(const elastic::trainer::TrainResult& result,
               const std::vector<std::string>& class_names) {
  std::printf("done: %lld epochs, %lld steps, test accuracy %.2f%%, %.0f train img/s%s\n",
              static_cast<long long>(result.epochs_completed), static_cast<long long>(result.steps),
              100 * result.last_eval.accuracy(), result.train_images_per_second,
              result.early_stopped ? " (early stop)" : "");
  if (result.last_eval.count > 0) PrintPerClass(result.last_eval, class_names);
}

// One rank of the fixed-size job mpirun started: the same loop as a
// single-process run, over MPI_COMM_WORLD.
int RunMpiRank(TrainOptions options) {
  std::unique_ptr<elastic::collectives::Communicator> world;
  try {
    elastic::collectives::MpiCommunicatorFactory factory;
    world = factory.Create(elastic::collectives::MpiCommunicatorFactory::WorldMembership());
    if (options.threads == 0) options.threads = elastic::trainer::MpiThreadsPerRank();
    if (world->rank() == 0) {
      elastic::trainer::CheckNoCheckpointToReplace(options.checkpoint_dir, options.resume);
      std::printf("mpirun: %d ranks, %lld images per rank and step, lr %g x %d\n", world->size(),
                  static_cast<long long>(options.batch_size), options.lr, world->size());
    }
    auto trainer = elastic::trainer::Trainer::FromOptions(options, stdout, world.get());
    const elastic::trainer::TrainResult result = trainer->Run();
    if (world->rank() == 0) PrintDone(result, trainer->class_names());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cifar: error (MPI rank %d of %d): %s\n", world ? world->rank() : -1,
                 world ? world->size() : 0, e.what());
    // Leave MPI without MPI_Finalize, which would wait for ranks that may be
    // blocked in a collective with this one: mpirun sees the failed rank and
    // ends the others at once.
    if (world) world->Abort();
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  elastic::trainer::KeepFreedMemoryForReuse();
  TrainOptions options;
  elastic::trainer::ElasticOptions elastic_options;
  FlagSet flags("cifar", kSummary);
  elastic::trainer::RegisterTrainFlags(flags, options);
  elastic::trainer::RegisterElasticFlags(flags, elastic_options);
  try {
    flags.Parse(argc, argv);
    if (flags.help_requested()) {
      std::fputs(flags.Help().c_str(), stdout);
      return 0;
    }
    std::vector<std::string> models;
    for (const auto& info : elastic::models::AvailableModels()) models.push_back(info.name);
    elastic::trainer::ValidateTrainOptions(options, models);
    if (elastic::trainer::StartedByMpirun()) elastic::trainer::ValidateMpiRun(elastic_options);
    elastic::trainer::ValidateElasticOptions(elastic_options, options);
    // The workers would compute here: refuse what they would get wrong now.
    if (!elastic_options.controller_only && !options.list_models) {
      elastic::trainer::CheckArithmetic(options);
    }
  } catch (const FlagError& e) {
    std::fprintf(stderr, "cifar: %s\n", e.what());
    return 2;
  }
  if (options.list_models) return ListModels();
  if (elastic::trainer::StartedByMpirun()) return RunMpiRank(options);
  if (elastic::trainer::IsElasticRun(elastic_options)) {
    return elastic::trainer::RunElastic(elastic_options, options,
                                        std::vector<std::string>(argv + 1, argv + argc));
  }

  try {
    elastic::trainer::CheckNoCheckpointToReplace(options.checkpoint_dir, options.resume);
    auto trainer = elastic::trainer::Trainer::FromOptions(options, stdout);
    PrintDone(trainer->Run(), trainer->class_names());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cifar: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
