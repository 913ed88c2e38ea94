#include "runtime/tensor_parallel_comm.hpp"

#include <chrono>
#include <future>

#include <fmt/format.h>

namespace troupe {
namespace {

class TransportTensorComm : public TensorParallelComm {
 public:
  TransportTensorComm(std::weak_ptr<Transport> transport, CommunicatorId comm, double timeout_s,
                      std::string name)
      : transport_(std::move(transport)), comm_(comm), timeout_s_(timeout_s), name_(std::move(name)) {}

  Status all_reduce(float* data, std::size_t count) override { return start_all_reduce(data, count)(); }
  Status all_gather(const float* input, float* output, std::size_t count) override {
    auto t = transport();
    if (!t) return gone();
    auto [done, wait] = completion();
    t->all_gather(input, output, count, DataType::f32, std::move(done), comm_);
    return wait();
  }
  Status reduce_scatter(const float* input, float* output, std::size_t count) override {
    return start_reduce_scatter(input, output, count)();
  }
  std::function<Status()> start_all_reduce(float* data, std::size_t count) override {
    auto t = transport();
    if (!t) return [this] { return gone(); };
    auto [done, wait] = completion();
    t->all_reduce(data, count, DataType::f32, ReduceOp::sum, std::move(done), comm_);
    return wait;
  }
  std::function<Status()> start_reduce_scatter(const float* input, float* output,
                                               std::size_t count) override {
    auto t = transport();
    if (!t) return [this] { return gone(); };
    auto [done, wait] = completion();
    t->reduce_scatter(input, output, count, DataType::f32, ReduceOp::sum, std::move(done), comm_);
    return wait;
  }

 private:
  std::shared_ptr<Transport> transport() const { return transport_.lock(); }
  Error gone() const { return make_error(fmt::format("{}: the transport has closed", name_)); }

  // A completion for the transport and the bounded wait for it.
  std::pair<Completion, std::function<Status()>> completion() const {
    auto promise = std::make_shared<std::promise<Status>>();
    std::shared_future<Status> future = promise->get_future().share();
    auto limit = std::chrono::duration<double>(timeout_s_ + 30);
    return {[promise](Status s) { promise->set_value(std::move(s)); },
            [future, limit, name = name_, seconds = timeout_s_ + 30]() -> Status {
              if (future.wait_for(limit) != std::future_status::ready)
                return make_error(fmt::format("{}: a collective did not end within {} s", name, seconds));
              Status s = future.get();
              if (!s.ok()) return make_error(fmt::format("{}: {}", name, s.error().message));
              return s;
            }};
  }

  std::weak_ptr<Transport> transport_;
  CommunicatorId comm_;
  double timeout_s_;
  std::string name_;
};

}  // namespace

std::shared_ptr<TensorParallelComm> make_transport_tensor_comm(std::weak_ptr<Transport> transport,
                                                               CommunicatorId comm, double timeout_s,
                                                               std::string name) {
  return std::make_shared<TransportTensorComm>(std::move(transport), comm, timeout_s, std::move(name));
}

}  // namespace troupe
