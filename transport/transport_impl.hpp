// Transport::Impl: the state and the progress thread behind Transport (transport.hpp).
// Internal to transport/: its definitions are split by concern —
//   progress.cpp   set-up, the progress loop, transfers and their completions
//   failures.cpp   lost peers, aborts, timeouts, mismatched calls
//   topology.cpp   host grouping and the two-level all-reduce
//   messages.cpp   actor messages between ranks
//   transport.cpp  the public face
// Thread safety: as transport.hpp says; every member below the command queue belongs to
// the progress thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/cpu/reduce.hpp"
#include "transport/bootstrap.hpp"
#include "transport/process_watch.hpp"
#include "transport/ring.hpp"
#include "transport/transport.hpp"
#include "transport/ucx_worker.hpp"
#include "transport/wire.hpp"

namespace troupe {
namespace transport_limits {
using Clock = std::chrono::steady_clock;
constexpr auto mismatch_probe_period = std::chrono::milliseconds(50);
constexpr std::size_t early_messages_max = 4096;  // actor messages kept until a handler is set
constexpr int busy_wait_ms = 1;                   // longest sleep while collectives or sends are in flight
constexpr int receive_wait_ms = 10;               // longest sleep while only posted receives wait
constexpr int idle_wait_ms = 100;                 // longest sleep between deadline checks
constexpr double teardown_bound_s = 2.0;          // flush and cancel at shutdown or failure
constexpr auto lost_peer_grace = std::chrono::milliseconds(200);  // see react_to_lost_peers
constexpr auto process_check_period = std::chrono::milliseconds(20);  // polls of the ranks' pidfds
}  // namespace transport_limits
using namespace transport_limits;

class Transport::Impl final : public TransferIo {
 public:
  Impl(const TransportOptions& options, std::unique_ptr<UcxWorker> worker)
      : processes_(options.rank), options_(options), worker_(std::move(worker)) {}
  ~Impl() override { stop(); }

  Status connect(const AddressTable& table);
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void stop();
  void submit(std::function<void()> command);
  /// On the progress thread, once every rank is connected (heartbeat.cpp).
  void start_heartbeats();

  void issue(uint64_t key, std::unique_ptr<Collective> collective, Completion done,
             std::vector<float> owned = {}, CommunicatorId comm = world_communicator, uint64_t tag = 0);
  /// Issues a point-to-point receive: it only waits for its peer (see driving()).
  void issue_receive(uint64_t key, std::unique_ptr<Collective> receive, Completion done);
  /// Whether an operation in flight has steps of its own to take (anything but a posted
  /// receive): the progress thread then polls and wakes often.
  bool driving() const;
  /// Issues a collective made for `shape` (its tag lets a mismatched peer be recognised).
  void issue(const CollectiveShape& shape, std::unique_ptr<Collective> collective, Completion done,
             std::vector<float> owned = {}) {
    issue(shape.key, std::move(collective), std::move(done), std::move(owned), shape.communicator,
          transfer_tag(shape, 0, 0, 0));
  }
  void abort_now(const std::string& reason);
  /// Actor messages (messages.cpp); both run on the progress thread.
  void send_message(int64_t peer, std::vector<uint8_t> bytes, Completion done);
  void set_message_handler(MessageHandler handler);
  /// Set when all-reduce runs in two levels: this rank's host and cross-host communicators.
  struct TwoLevel {
    CommunicatorId local = 0;
    CommunicatorId cross = 0;
  };
  std::optional<TwoLevel> two_level_;
  void issue_two_level_all_reduce(void* data, std::size_t count, DataType type, ReduceOp op, Completion done);
  /// The shape of the next collective on `comm`, in issue order; an error when this
  /// rank is not a member or the communicator does not exist.
  Result<CollectiveShape> next_shape(CommunicatorId comm, uint64_t descriptor) {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    if (comm >= communicators_.size())
      return make_error(fmt::format("communicator {} does not exist on rank {}", comm, options_.rank));
    CommunicatorState& c = communicators_[comm];
    if (c.position < 0)
      return make_error(fmt::format("rank {} is not a member of communicator {}", options_.rank, comm));
    uint64_t sequence = c.next_sequence++;
    return CollectiveShape{sequence,
                           comm << 48 | (sequence & ((uint64_t{1} << 48) - 1)),
                           comm,
                           descriptor,
                           c.position,
                           static_cast<int64_t>(c.members.size()),
                           options_.chunk_bytes,
                           options_.chunks_in_flight};
  }
  /// Registers a communicator every rank agreed on; returns its id.
  CommunicatorId add_communicator(std::vector<int64_t> members) {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    auto it = std::find(members.begin(), members.end(), options_.rank);
    int64_t position = it == members.end() ? -1 : it - members.begin();
    communicators_.push_back(CommunicatorState{std::move(members), position, 0});
    return communicators_.size() - 1;
  }
  int64_t position_in(CommunicatorId comm) const {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    return comm < communicators_.size() ? communicators_[comm].position : -1;
  }
  int64_t size_of(CommunicatorId comm) const {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    return comm < communicators_.size() ? static_cast<int64_t>(communicators_[comm].members.size()) : 0;
  }
  std::size_t communicator_count() const {
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    return communicators_.size();
  }
  /// Identity and tag of the next point-to-point message to (send) or from (recv) `peer`.
  std::pair<uint64_t, uint64_t> next_point_to_point(int64_t peer, bool receive) {
    uint64_t& sequence = receive ? received_from_[peer] : sent_to_[peer];
    uint64_t tag = point_to_point_tag(sequence++, receive ? peer : options_.rank);
    return {point_to_point_ids_++, tag};
  }
  /// An identity for a keyed point-to-point message (apart from the collectives').
  uint64_t next_operation_id() { return point_to_point_ids_++; }
  int64_t rank() const { return options_.rank; }
  Status check_peer(int64_t peer) const {
    if (peer < 0 || peer >= options_.world_size || peer == options_.rank)
      return make_error(
          fmt::format("rank {} cannot exchange messages with rank {}: peers are 0-{} except itself",
                      options_.rank, peer, options_.world_size - 1));
    return {};
  }

  void post_send(int64_t peer, const void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                 uint64_t chunk) override;
  void post_recv(int64_t peer, void* data, std::size_t bytes, uint64_t tag, uint64_t op,
                 uint64_t chunk) override;

  const TransportOptions& options() const { return options_; }
  std::shared_ptr<const std::atomic<uint64_t>> bytes_sent() const { return bytes_sent_; }

 private:
  struct Transfer {
    Impl* self;
    uint64_t op;
    uint64_t chunk;
    int64_t peer;
    bool recv;
    uint64_t tag = 0;
    std::size_t bytes = 0;
    void* request = nullptr;
    ucs_status_t status = UCS_OK;
    uint64_t received_tag = 0;  // receives: what actually arrived
    std::size_t received_bytes = 0;
  };
  struct Operation {
    std::unique_ptr<Collective> collective;
    Completion done;
    Clock::time_point deadline;
    std::vector<float> owned;  // buffers the transport itself provides (barrier)
    CommunicatorId communicator = world_communicator;
    uint64_t tag = 0;  // of its first transfer: names the operation and the call
    Clock::time_point started = Clock::now();
    int64_t first_moved_us = 0;  // when its first receive finished (traced runs only)
    bool awaits_peer = false;    // a posted receive: nothing to do until the peer's bytes arrive
  };
  struct PeerSlot {
    Impl* self;
    int64_t rank;
  };
  struct CommunicatorState {
    std::vector<int64_t> members;  // world ranks, by position
    int64_t position;              // this rank's, or -1
    uint64_t next_sequence;
  };
  /// The world rank of position `peer` in the communicator of operation `op`.
  int64_t world_rank_of(uint64_t op, int64_t peer) const {
    auto it = operations_.find(op);
    if (it == operations_.end() || it->second.communicator == world_communicator) return peer;
    std::lock_guard<std::mutex> lock(communicators_mutex_);
    return communicators_[it->second.communicator].members[static_cast<std::size_t>(peer)];
  }

  static void on_send(void* request, ucs_status_t status, void* user_data);
  static void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user_data);
  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status);
  static ucs_status_t on_actor_message(void* arg, const void* header, size_t header_bytes, void* data,
                                       size_t bytes, const ucp_am_recv_param_t* param);
  static ucs_status_t on_abort(void* arg, const void* header, size_t header_bytes, void* data, size_t bytes,
                               const ucp_am_recv_param_t*);
  static ucs_status_t on_heartbeat(void* arg, const void* header, size_t header_bytes, void* data,
                                   size_t bytes, const ucp_am_recv_param_t*);

  void run();
  void track(Transfer* t, ucs_status_ptr_t request);
  /// Reacts to the transfers UCX finished; returns whether there were any.
  bool drain_finished();
  void check_deadlines();
  /// Whether a failure is passed on: not when a peer's own abort frame reported it.
  enum class Notify { peers, nobody };
  void fail_all(const Error& error, Notify notify);
  void tell_peers(const std::string& reason);
  void complete(uint64_t id, const Status& status);
  void close_endpoints();
  std::string waiting_on(uint64_t op) const;
  Status plan_topology(const std::vector<std::string>& hosts);
  void check_mismatches();
  void react_to_lost_peers();
  /// Adds the ranks of this host whose process has exited to peer_failures_ (failures.cpp).
  void check_processes();
  ProcessWatch processes_;  // the other ranks of this host
  Clock::time_point next_process_check_;
  /// Sends this rank's heartbeats when due and finds a watched peer silent for longer
  /// than peer_timeout_s (heartbeat.cpp). Nothing is watched before start_heartbeats().
  void keep_heartbeats();
  void send_heartbeats();
  void check_silence(Clock::time_point now);
  std::vector<int64_t> watched_;          // rank 0 watches every rank, the others rank 0
  std::vector<Clock::time_point> heard_;  // by rank: the last heartbeat received
  wire::Frame heartbeat_frame_;
  Clock::duration heartbeat_period_{};
  Clock::time_point next_heartbeat_;
  Clock::time_point last_probe_ = Clock::now();
  std::string transfer_failure(const Transfer& t, const std::string& what) const;

  TransportOptions options_;
  std::unique_ptr<UcxWorker> worker_;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<std::unique_ptr<PeerSlot>> slots_;

  mutable std::mutex communicators_mutex_;  // guards communicators_
  std::vector<CommunicatorState> communicators_;
  std::mutex mutex_;  // guards commands_ and stopping_
  std::vector<std::function<void()>> commands_;
  std::atomic<bool> commands_waiting_{false};  // ends the progress thread's polling early
  // Payload bytes posted by post_send (Transport::bytes_sent): any thread reads it.
  std::shared_ptr<std::atomic<uint64_t>> bytes_sent_ = std::make_shared<std::atomic<uint64_t>>(0);
  bool stopping_ = false;
  std::thread thread_;

  // Below: owned by the progress thread.
  uint64_t point_to_point_ids_ = uint64_t{1} << 63;  // operation ids apart from the collectives'
  std::map<int64_t, uint64_t> sent_to_, received_from_;
  std::map<uint64_t, Operation> operations_;
  std::unordered_set<Transfer*> in_flight_;
  std::vector<Transfer*> finished_;         // filled by UCX callbacks
  std::vector<std::string> peer_failures_;  // lost endpoints, filled by UCX callbacks
  std::vector<std::string> peer_aborts_;    // abort frames, filled by UCX callbacks
  MessageHandler message_handler_;          // actor messages go here
  bool messages_moved_ = false;             // since the last sleep: a reply is likely soon
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> early_messages_;  // arrived before the handler
  std::optional<Error> failed_;
  std::optional<Error> lost_;                    // a peer lost while nothing was in flight
  std::optional<Clock::time_point> first_loss_;  // when the pending peer failures began
  bool closing_ = false;
};

}  // namespace troupe
