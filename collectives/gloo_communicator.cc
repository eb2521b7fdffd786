#include "collectives/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <vector>

#include "collectives/gloo_abortable_buffers.h"
#include "collectives/gloo_mesh.h"
#include "collectives/gloo_pair_proof.h"
#include "collectives/half.h"
#include "collectives/op_queue.h"
#include "collectives/socket_tripwire.h"

namespace elastic::collectives {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// Gloo's barrier options, with the buffer they make exposed so that Abort()
// can poke it (gloo_abortable_buffers.h).
class PokableBarrierOptions : public gloo::BarrierOptions {
 public:
  using gloo::BarrierOptions::BarrierOptions;
  gloo::transport::UnboundBuffer* buffer_in_use() const { return buffer.get(); }
};

template <typename T>
void RunAllreduce(const std::shared_ptr<gloo::Context>& context, LiveBuffers& live, void* data,
                  size_t count, uint32_t tag, Timeout timeout) {
  gloo::AllreduceOptions options(context);
  auto output = context->createUnboundBuffer(data, count * sizeof(T));
  const LiveBuffers::Scope scope(live, {output.get()});
  options.setOutput<T>(std::move(output));
  options.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<T>));
  options.setTag(tag);
  options.setTimeout(timeout);
  gloo::allreduce(options);
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const Membership& membership, const GlooOptions& options,
                   runtime::KeyValueStore& store)
      : Communicator(membership, options.default_timeout) {
    // The store's own socket must exist before the tripwire is armed, or
    // Abort would shut the store's connection down too: the stores here
    // connect when they are made (HeadClient) or have no socket (files).
    tripwire_.Arm();
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<GlooMeshContext>(membership.rank, membership.size);
    context->setTimeout(options.rendezvous_timeout);
    const std::string what =
        "gloo rendezvous of generation " + std::to_string(membership.generation);
    const std::string key_prefix =
        runtime::GenerationKey(membership.generation, "gloo/" + options.tag + "/");
    try {
      context->Connect(store, key_prefix, device_, options.rendezvous_timeout, what,
                       options.abandoned);
    } catch (const CollectiveError&) {
      throw;
    } catch (const std::exception& e) {
      throw CollectiveError(what + " failed: " + e.what());
    }
    tripwire_.Capture();
    if (!options.token.empty()) {
      // The pairs are connected, but to whoever reached their ports first:
      // no collective runs before each peer proved it holds the token.
      AuthenticatePairs(*context, options.token, {membership.generation, options.tag},
                        options.rendezvous_timeout,
                        [&](int peer) { return context->DescribePeer(peer); });
    }
    context_ = std::move(context);
    queue_ = std::make_unique<OpQueue>([this](const std::exception_ptr&) {
      // This member is out of step with its peers now; make sure none of them
      // waits for it until their timeout.
      tripwire_.Trip();
    });
    aborter_ = std::make_unique<CollectiveAborter>(
        live_, [queue = queue_.get()] { return queue->busy(); });
  }

  ~GlooCommunicator() override {
    // If an operation is still running (its peers never came), wake it so the
    // queue's thread can be joined now rather than at the operation's timeout.
    aborted_ = true;
    const auto error =
        std::make_exception_ptr(CollectiveAborted(Describe("communicator destroyed")));
    queue_->Fail(error);
    if (queue_->busy()) {
      tripwire_.Trip();
      aborter_->Start();
    }
    aborter_->Finish();  // the operation in flight has ended
    queue_.reset();
    aborter_.reset();
    context_.reset();
    device_.reset();
  }

  std::string backend() const override { return "gloo"; }

  void Abort() override {
    aborted_ = true;
    const auto error = std::make_exception_ptr(CollectiveAborted(Describe("aborted")));
    queue_->Fail(error);
    tripwire_.Trip();
    // Wakes what the sockets' shutdown does not (a send already in Gloo's
    // transmit queue): gloo_abortable_buffers.h.
    aborter_->Start();
  }

 protected:
  std::shared_ptr<Work> DoAllreduce(void* data, size_t count, DataType type, ReduceOp op,
                                    Timeout timeout) override {
    const std::string what = Describe(std::string("allreduce ") + ReduceOpName(op) + " " +
                                      DataTypeName(type) + " x" + std::to_string(count));
    return Submit(what, timeout, [=](uint32_t tag) {
      if (count == 0 || size() == 1) return;
      switch (type) {
        case DataType::kFloat32:
          RunAllreduce<float>(context_, live_, data, count, tag, timeout);
          break;
        case DataType::kFloat64:
          RunAllreduce<double>(context_, live_, data, count, tag, timeout);
          break;
        case DataType::kInt64:
          RunAllreduce<int64_t>(context_, live_, data, count, tag, timeout);
          break;
        case DataType::kFloat16:
          RunAllreduce<gloo::float16>(context_, live_, data, count, tag, timeout);
          break;
        case DataType::kBFloat16: {
          // Gloo cannot add bfloat16: widen, reduce as float32 (which also
          // avoids compounding rounding across ranks), narrow once at the end.
          std::vector<float> wide(count);
          WidenToFloat(type, data, wide.data(), count);
          RunAllreduce<float>(context_, live_, wide.data(), count, tag, timeout);
          if (op == ReduceOp::kAverage)
            DivideInPlace(DataType::kFloat32, wide.data(), count, size());
          NarrowFromFloat(type, wide.data(), data, count);
          return;
        }
      }
      if (op == ReduceOp::kAverage) DivideInPlace(type, data, count, size());
    });
  }

  std::shared_ptr<Work> DoBroadcast(void* data, size_t count, DataType type, int root,
                                    Timeout timeout) override {
    const size_t bytes = count * ElementSize(type);
    const std::string what = Describe("broadcast from " + std::to_string(root) + " " +
                                      DataTypeName(type) + " x" + std::to_string(count));
    return Submit(what, timeout, [=](uint32_t tag) {
      if (bytes == 0 || size() == 1) return;
      gloo::BroadcastOptions options(context_);
      auto output = context_->createUnboundBuffer(data, bytes);
      const LiveBuffers::Scope scope(live_, {output.get()});
      options.setOutput<uint8_t>(std::move(output));
      options.setRoot(root);
      options.setTag(tag);
      options.setTimeout(timeout);
      gloo::broadcast(options);
    });
  }

  std::shared_ptr<Work> DoAllgather(const void* input, void* output, size_t count, DataType type,
                                    Timeout timeout) override {
    const size_t bytes = count * ElementSize(type);
    const std::string what =
        Describe(std::string("allgather ") + DataTypeName(type) + " x" + std::to_string(count));
    return Submit(what, timeout, [=](uint32_t tag) {
      if (bytes == 0) return;
      if (size() == 1) {
        std::memcpy(output, input, bytes);
        return;
      }
      gloo::AllgatherOptions options(context_);
      // Gloo reads the input through a non-const pointer but does not write it.
      auto in = context_->createUnboundBuffer(const_cast<void*>(input), bytes);
      auto out = context_->createUnboundBuffer(output, bytes * size());
      const LiveBuffers::Scope scope(live_, {in.get(), out.get()});
      options.setInput<uint8_t>(std::move(in));
      options.setOutput<uint8_t>(std::move(out));
      options.setTag(tag);
      options.setTimeout(timeout);
      gloo::allgather(options);
    });
  }

  std::shared_ptr<Work> DoBarrier(Timeout timeout) override {
    return Submit(Describe("barrier"), timeout, [=](uint32_t tag) {
      if (size() == 1) return;
      PokableBarrierOptions options(context_);
      const LiveBuffers::Scope scope(live_, {options.buffer_in_use()});
      options.setTag(tag);
      options.setTimeout(timeout);
      gloo::barrier(options);
    });
  }

 private:
  std::string Describe(const std::string& what) const {
    return "gloo " + what + " (generation " + std::to_string(generation()) + ", rank " +
           std::to_string(rank()) + "/" + std::to_string(size()) + ")";
  }

  // Wraps a Gloo call: gives it a fresh tag, and turns Gloo's exceptions into
  // CollectiveErrors that say whether it was a timeout, an abort or a lost peer.
  std::shared_ptr<Work> Submit(const std::string& what, Timeout timeout,
                               std::function<void(uint32_t)> run) {
    return queue_->Submit(what, [this, what, timeout, run = std::move(run)] {
      // Tags are drawn on the queue's thread, in execution order, which is the
      // same on every member.
      const uint32_t tag = next_tag_++;
      try {
        run(tag);
        // A poked wait returns early: what an aborted operation leaves in
        // its buffers is no result.
        if (aborted_) throw CollectiveAborted(what + ": aborted");
      } catch (const CollectiveAborted&) {
        throw;
      } catch (const std::exception& e) {
        const std::string message = e.what();
        // (Never touch queue_ here: the destructor resets it while this runs.)
        if (aborted_) throw CollectiveAborted(what + ": aborted");
        if (message.find("Timed out") != std::string::npos) {
          throw CollectiveTimeout(what + ": timed out after " + std::to_string(timeout.count()) +
                                  " ms: " + message);
        }
        throw CollectiveError(what + ": failed (a peer left or broke the connection): " + message);
      }
    });
  }

  SocketTripwire tripwire_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  LiveBuffers live_;                  // the buffers of the operation in flight, poked after Abort
  std::atomic<bool> aborted_{false};  // Abort() or destruction began
  uint32_t next_tag_ = 0;             // only touched on the queue's thread
  std::unique_ptr<OpQueue> queue_;
  std::unique_ptr<CollectiveAborter> aborter_;  // pokes live_ while queue_'s operation unwinds
};

// Gloo's TCP pairs write without MSG_NOSIGNAL, so a write to a peer that was
// just killed raises SIGPIPE in the writing thread, and SIGPIPE's default
// action ends the process: a survivor of a kill -9 would die with its peer
// instead of failing the collective. A handler the program installed is its
// own and is left alone; only the default is replaced (as gRPC does).
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

GlooCommunicatorFactory::GlooCommunicatorFactory(runtime::KeyValueStore& store, GlooOptions options)
    : store_(store), options_(std::move(options)) {
  IgnoreSigpipeUnlessHandled();
}

std::unique_ptr<Communicator> GlooCommunicatorFactory::Create(const Membership& membership) {
  return std::make_unique<GlooCommunicator>(membership, options_, store_);
}

}  // namespace elastic::collectives
