#include "pipeline/stage_session.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/sys.h"
#include "exec/executor.h"
#include "modelstore/model_files.h"
#include "pipeline/weight_receiver.h"
#include "pipeline/wire.h"
#include "model/forward.h"
#include "model/layout.h"
#include "quant/quant.h"

namespace tandem::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
using net::Connection;
using net::MsgType;

struct Task {
  MsgType kind = MsgType::kForward;
  net::LoadModel load;
  net::LinkNext link;
  net::Forward forward;
};

}  // namespace

// The session's state and threads (see stage_session.h).
class StageSession::Impl {
 public:
  Impl(const WorkerOptions& o, uint64_t free_memory, std::string peer)
      : o_(o), free_memory_(free_memory), peer_(std::move(peer)) {}
  ~Impl() { Join(); }

  const std::string& peer() const { return peer_; }
  uint64_t id() const { return id_.load(); }
  bool finished() const { return finished_.load(); }

  void Begin(net::Socket s) {
    // Under the lock: a frame that arrives at once (a Ping) finds main_ set (Get waits for it).
    std::lock_guard<std::mutex> lock(mu_);
    main_ = Connection::Start(
        std::move(s), "main node " + peer_,
        [this](uint16_t t, std::span<const uint8_t> p) { OnMainNodeFrame(t, p); },
        [this](const Status& why) { Shutdown("main node connection closed: " + why.message()); });
    compute_ = std::thread([this] { ComputeLoop(); });
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  }

  Status AttachUpstream(net::Socket s, const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (up_) return Status::InvalidArgument("the session already has an upstream stage");
    up_ = Connection::Start(
        std::move(s), "previous stage " + peer,
        [this](uint16_t t, std::span<const uint8_t> p) { OnUpstreamFrame(t, p); },
        [this](const Status& why) {
          if (!finished_) Fail(0, Status::IOError("link from the previous stage lost: " + why.message()));
        });
    return Status::Ok();
  }

  // Stops everything; safe from any thread, any number of times.
  void Shutdown(const std::string& why) {
    if (finished_.exchange(true)) return;
    Log("session from " + peer_ + " ended: " + why);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto* c : {&main_, &up_, &down_}) {
        if (*c) (*c)->Close(Status::Ok());
      }
    }
    receiver_.Cancel();
    cv_.notify_all();
  }

  void Join() {
    if (compute_.joinable()) compute_.join();
    if (heartbeat_.joinable()) heartbeat_.join();
    std::shared_ptr<Connection> conns[3];
    {
      std::lock_guard<std::mutex> lock(mu_);
      conns[0] = main_;
      conns[1] = up_;
      conns[2] = down_;
    }
    for (auto& c : conns) {
      if (c) {
        c->Close();
        c->Join();
      }
    }
  }

 private:
  // Reports a failure to the main node and ends the session.
  void Fail(uint64_t request, const Status& st) {
    SendError(request, st);
    // Give the sender thread a moment to put the error on the wire before closing.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Shutdown(st.ToString());
  }

  void SendError(uint64_t request, const Status& st) {
    net::ErrorMsg e;
    e.request = request;
    e.code = static_cast<uint8_t>(st.ok() ? Code::kInternal : st.code());
    e.message = st.message();
    std::shared_ptr<Connection> ctl = Get(&main_);
    if (ctl) ctl->Send(MsgType::kError, e);
  }

  std::shared_ptr<Connection> Get(std::shared_ptr<Connection>* c) {
    std::lock_guard<std::mutex> lock(mu_);
    return *c;
  }

  void Push(Task t) {
    std::unique_lock<std::mutex> lock(mu_);
    // Back-pressure: the reader stops reading (and TCP pushes back) while the queue is full.
    cv_.wait(lock, [&] { return finished_ || tasks_.size() < 64; });
    if (finished_) return;
    tasks_.push_back(std::move(t));
    cv_.notify_all();
  }

  // A small Forward (a decode step) that finds the session idle runs right here on the reader
  // thread that decoded it: handing it to the compute thread costs a thread wake-up per stage
  // boundary, tens of microseconds on a VM, on every token. Anything else, and everything that
  // arrives while a task runs, goes through the queue in order. A small Forward takes
  // milliseconds, so the pongs this reader owes are late by at most that (the link is declared
  // dead after link_dead_ms, seconds).
  void RunOrPush(Task t) {
    if (t.kind == MsgType::kForward && t.forward.seq.size() <= kInlineForwardTokens) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!finished_ && tasks_.empty() && !busy_) {
        busy_ = true;
        lock.unlock();
        RunForward(t.forward);
        lock.lock();
        busy_ = false;
        lock.unlock();
        cv_.notify_all();
        return;
      }
    }
    Push(std::move(t));
  }

  void ProtocolError(const std::string& from, const std::string& what) {
    Log("protocol error from " + from + ": " + what);
    Fail(0, Status::Corruption("protocol error from " + from + ": " + what));
  }

  void OnMainNodeFrame(uint16_t type, std::span<const uint8_t> p) {
    Task t;
    t.kind = static_cast<MsgType>(type);
    switch (t.kind) {
      case MsgType::kPing: {
        Result<net::Ping> ping = net::Ping::Decode(p);
        if (!ping.ok()) return ProtocolError(peer_, ping.status().message());
        Get(&main_)->Send(MsgType::kPong, *ping);
        return;
      }
      case MsgType::kEndSession:
        return Shutdown("the main node ended the session");
      case MsgType::kWeightsChunk:
        return OnWeightsChunk(p);
      case MsgType::kWeightsDone:
        return OnWeightsDone(p);
      case MsgType::kLoadModel: {
        Result<net::LoadModel> m = net::LoadModel::Decode(p);
        if (!m.ok()) return ProtocolError(peer_, m.status().message());
        t.load = std::move(*m);
        id_ = t.load.session;
        return Push(std::move(t));
      }
      case MsgType::kLinkNext: {
        Result<net::LinkNext> m = net::LinkNext::Decode(p);
        if (!m.ok()) return ProtocolError(peer_, m.status().message());
        t.link = std::move(*m);
        return Push(std::move(t));
      }
      case MsgType::kForward: {
        Status st = net::Forward::DecodeInto(p, &t.forward);
        if (!st.ok()) return ProtocolError(peer_, st.message());
        return RunOrPush(std::move(t));
      }
      default:
        return ProtocolError(peer_, "unexpected " + std::string(net::MsgTypeName(type)) + " frame");
    }
  }

  void OnUpstreamFrame(uint16_t type, std::span<const uint8_t> p) {
    if (type == static_cast<uint16_t>(MsgType::kPing)) {
      Result<net::Ping> ping = net::Ping::Decode(p);
      if (!ping.ok()) return ProtocolError("the previous stage", ping.status().message());
      Get(&up_)->Send(MsgType::kPong, *ping);
      return;
    }
    if (type != static_cast<uint16_t>(MsgType::kForward)) {
      return ProtocolError("the previous stage", "unexpected " + std::string(net::MsgTypeName(type)) + " frame");
    }
    Task t;
    t.kind = MsgType::kForward;
    Status st = net::Forward::DecodeInto(p, &t.forward);
    if (!st.ok()) return ProtocolError("the previous stage", st.message());
    RunOrPush(std::move(t));
  }

  void ComputeLoop() {
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return finished_ || (!tasks_.empty() && !busy_); });
        if (finished_) return;
        t = std::move(tasks_.front());
        tasks_.pop_front();
        busy_ = true;
      }
      cv_.notify_all();
      // No exception leaves the compute thread: one (an allocation refused) ends the session
      // with the reason, and the worker goes on serving.
      try {
        switch (t.kind) {
          case MsgType::kLoadModel: {
            Status st = Load(t.load);
            if (!st.ok()) Fail(0, st);
            break;
          }
          case MsgType::kLinkNext: {
            Status st = Link(t.link);
            if (!st.ok()) Fail(0, st);
            break;
          }
          default:
            RunForward(t.forward);
        }
      } catch (const std::exception& e) {
        Fail(t.kind == MsgType::kForward ? t.forward.request : 0, Status::Internal(std::string("worker: ") + e.what()));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      cv_.notify_all();
    }
  }

  void HeartbeatLoop() {
    uint64_t n = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!finished_) {
      cv_.wait_for(lock, std::chrono::milliseconds(o_.ping_interval_ms));
      if (finished_) return;
      std::shared_ptr<Connection> down = down_, ctl = main_;
      lock.unlock();
      if (down) {
        down->Send(MsgType::kPing, net::Ping{++n});
        const int64_t silent = MsSince(down->last_receive());
        if (silent > o_.link_dead_ms) {
          Fail(0, Status::IOError("the link to the next stage " + down->name() + " has been silent for " +
                                  std::to_string(silent) + " ms"));
        }
      }
      if (ctl && MsSince(ctl->last_receive()) > o_.main_node_dead_ms) {
        Shutdown("the main node has been silent for " + std::to_string(MsSince(ctl->last_receive())) + " ms");
      }
      lock.lock();
    }
  }

  // Where this stage's copy of the model is: a local file, the weight cache, or (received from
  // the main node now) a new cache entry. Whatever the source, every tensor this stage uses is
  // checked against the main node's digests first. *source says which, *received the bytes that
  // came over the network.
  Result<std::string> FindWeights(const net::LoadModel& m, std::string* source, uint64_t* received) {
    modelstore::ModelDigests want;
    want.id = {m.header_digest, m.file_size};
    want.tensors = m.tensor_digests;
    const int64_t b = m.layer_begin, e = m.layer_end;
    *received = 0;
    Result<std::string> path = modelstore::FindModel(want.id, {o_.model_path}, o_.models_dir);
    if (!path.ok() && o_.use_main_path) {
      Result<std::string> same_machine = modelstore::FindModel(want.id, {m.model_path}, "");
      if (same_machine.ok()) path = std::move(same_machine);
    }
    std::string why_not_local;
    if (path.ok()) {
      const auto start = Clock::now();
      Status same = modelstore::VerifyStageCopy(*path, want, b, e, m.last_stage);
      if (same.ok()) {
        Log("checked layers " + std::to_string(b) + ".." + std::to_string(e - 1) + " of " + *path +
            " against the main node's digests in " + std::to_string(MsSince(start)) + " ms");
        *source = "local file " + *path;
        return path;
      }
      // Same header, other weights (an unfinished download, an edited file): never used.
      why_not_local = "the local copy " + *path + " is not the main node's model (" + same.message() + ")";
      Log(why_not_local + "; not using it");
    }
    if (o_.cache_dir.empty()) {
      // What was tried (paths, a listing of --models-dir) stays in this worker's log; the main
      // node learns only that there is no copy.
      if (!path.ok()) Log(path.status().message());
      return Status::NotFound("this worker has no copy of " + m.model_name + " (size " + std::to_string(want.id.file_size) +
                              ", header digest " + want.id.Hex() + ")" +
                              (why_not_local.empty() ? "" : " whose weights match the main node's") +
                              "; give it -m FILE or --models-dir DIR, or "
                              "--cache-dir DIR to receive the weights from the main node once");
    }
    modelstore::WeightCache cache(o_.cache_dir);
    TANDEM_RETURN_IF_ERROR(cache.Prepare());
    if (Result<std::string> cached = cache.Find(want, b, e, m.last_stage); cached.ok()) {
      *source = "cache " + *cached;
      return cached;
    }
    TANDEM_ASSIGN_OR_RETURN(std::string got, Receive(cache, want, m));
    *received = receiver_.bytes();
    *source = "the main node, now cached in " + got;
    return got;
  }

  // Brings the stage's tensors into memory (a copy on huge pages, or with --mmap a read through
  // the map), reporting progress to the main node. Ok with nothing done when the session ends.
  Status BringIntoMemory(const net::LoadModel& m, const model::StageTensors& stage, const std::string& path) {
    std::shared_ptr<Connection> main_node = Get(&main_);
    const bool last = m.layer_end == model_->params().n_layer;
    if (!m.use_mmap) {
      // The GPU's layers (the last gpu_layers_) go to the device from the map, never to host memory.
      const int64_t host_end = m.layer_end - gpu_layers_;
      Status st = model_->CopyIntoMemory(m.layer_begin, host_end, last && gpu_layers_ == 0, [&](uint64_t done, uint64_t all) {
        main_node->Send(MsgType::kLoadProgress, net::LoadProgress{done, all, "copying weights from " + path});
        return !finished_.load();
      });
      return st.code() == Code::kCancelled ? Status::Ok() : st;
    }
    uint64_t done = 0, sink = 0;
    auto last_report = Clock::now();
    for (const gguf::TensorInfo* t : stage.tensors) {
      for (uint64_t off = 0; off < t->n_bytes; off += 4096) sink += t->data[off];
      done += t->n_bytes;
      if (MsSince(last_report) > 200 || done == stage.bytes) {
        main_node->Send(MsgType::kLoadProgress, net::LoadProgress{done, stage.bytes, "reading weights from " + path});
        last_report = Clock::now();
      }
      if (finished_) return Status::Ok();
    }
    (void)sink;
    return Status::Ok();
  }

  Status Load(const net::LoadModel& m) {
    if (model_) return Status::InvalidArgument("the session already has a model");
    std::string source;
    uint64_t received = 0;
    TANDEM_ASSIGN_OR_RETURN(std::string path, FindWeights(m, &source, &received));
    TANDEM_ASSIGN_OR_RETURN(model::Model model, model::Model::Load(path));
    const model::ModelParams& p = model.params();
    if (m.layer_end > p.n_layer) {
      return Status::InvalidArgument("layers " + std::to_string(m.layer_begin) + ".." +
                                     std::to_string(m.layer_end - 1) + " do not exist in a " +
                                     std::to_string(p.n_layer) + "-layer model");
    }
    model_ = std::make_unique<model::Model>(std::move(model));
    model::ContextOptions copts;
    copts.flash_attn = m.flash_attn;
    copts.type_k = m.cache_k == net::KvType::kQ8_0 ? quant::TensorType::kQ8_0 : quant::TensorType::kF16;
    copts.type_v = m.cache_v == net::KvType::kQ8_0 ? quant::TensorType::kQ8_0 : quant::TensorType::kF16;
    copts.device = o_.device;
    copts.gpu_layers = o_.gpu_layers;
    TANDEM_RETURN_IF_ERROR(model::CheckContextOptions(model_->params(), copts));
    gpu_layers_ = model::GpuLayerCount(*model_, m.n_ctx, m.layer_begin, m.layer_end, copts);
    // This stage's weights (never the first stage: that is the main node) and KV cache; refused
    // before anything is read or copied when they do not fit.
    const model::StageTensors stage = model::TensorsOfStage(model_->file(), m.layer_begin, m.layer_end,
                                                            /*first=*/false, m.layer_end == model_->params().n_layer);
    const uint64_t kv_bytes = model::KvCacheBytes(model_->params(), m.n_ctx, m.layer_begin, m.layer_end,
                                                  copts.type_k, copts.type_v);
    // Host memory holds the layers not on the GPU (the GPU checks its own before any upload).
    const int64_t host_end = m.layer_end - gpu_layers_;
    const bool head_on_host = m.layer_end == model_->params().n_layer && gpu_layers_ == 0;
    const uint64_t host_bytes =
        model::TensorsOfStage(model_->file(), m.layer_begin, host_end, false, head_on_host).bytes +
        model::KvCacheBytes(model_->params(), m.n_ctx, m.layer_begin, host_end, copts.type_k, copts.type_v);
    if (free_memory_ > 0 && host_bytes > free_memory_) {
      return Status::ResourceExhausted("layers " + std::to_string(m.layer_begin) + ".." +
                                       std::to_string(host_end - 1) + " need " + std::to_string(host_bytes >> 20) +
                                       " MiB but this worker has " + std::to_string(free_memory_ >> 20) + " MiB");
    }
    TANDEM_RETURN_IF_ERROR(BringIntoMemory(m, stage, path));
    if (finished_) return Status::Ok();
    stage_ = std::make_unique<exec::Stage>(*model_, m.n_ctx, o_.threads, m.layer_begin, m.layer_end, copts);
    TANDEM_RETURN_IF_ERROR(stage_->context().status());
    const std::string on_gpu = gpu_layers_ > 0 ? ", " + std::to_string(gpu_layers_) + " of them on " +
                                                     o_.device->info().name + " (" + o_.device->info().description + ")"
                                               : "";
    Log("session " + peer_ + ": layers " + std::to_string(m.layer_begin) + ".." + std::to_string(m.layer_end - 1) +
        on_gpu + " of " + path + " (" + std::to_string(stage.bytes >> 20) + " MiB weights " +
        (m.use_mmap ? "used from the file map" : "copied into memory") + ", " + std::to_string(kv_bytes >> 20) +
        " MiB KV cache, " + std::to_string(o_.threads) + " threads, weights from " + source + ")");
    Get(&main_)->Send(MsgType::kLoaded, net::Loaded{stage.bytes, kv_bytes, received, source});
    return Status::Ok();
  }


  // Asks the main node for this stage's bytes of the model file, which the reader thread writes
  // into a new file in the cache (receiver_); returns the copy's path once every byte this stage
  // uses matches the model's digests.
  Result<std::string> Receive(const modelstore::WeightCache& cache, const modelstore::ModelDigests& want,
                              const net::LoadModel& m) {
    std::error_code ec;
    const std::string temp = cache.NewTempPath(want, m.layer_begin, m.layer_end, m.last_stage);
    TANDEM_RETURN_IF_ERROR(receiver_.Open(temp, want.id.file_size));
    Log("no local copy of " + m.model_name + ": receiving layers " + std::to_string(m.layer_begin) +
        ".." + std::to_string(m.layer_end - 1) + " from " + peer_);
    Get(&main_)->Send(MsgType::kNeedWeights, net::Empty{});
    if (Status st = receiver_.Wait(); !st.ok()) {
      std::filesystem::remove(temp, ec);
      return st;
    }
    TANDEM_RETURN_IF_ERROR(cache.Commit(temp, want, m.layer_begin, m.layer_end, m.last_stage));
    return cache.FinalPath(want, m.layer_begin, m.layer_end, m.last_stage);
  }

  void OnWeightsChunk(std::span<const uint8_t> p) {
    Result<net::WeightsChunk> c = net::WeightsChunk::Decode(p);
    if (!c.ok()) return ProtocolError(peer_, c.status().message());
    bool progress = false;
    uint64_t done = 0;
    if (!receiver_.Chunk(*c, &progress, &done)) return ProtocolError(peer_, "weights that were not asked for");
    if (progress) Get(&main_)->Send(MsgType::kLoadProgress, net::LoadProgress{done, c->total, "receiving weights"});
  }

  void OnWeightsDone(std::span<const uint8_t> p) {
    Result<net::WeightsDone> d = net::WeightsDone::Decode(p);
    if (!d.ok()) return ProtocolError(peer_, d.status().message());
    if (!receiver_.Done()) return ProtocolError(peer_, "WeightsDone without a transfer");
  }

  Status Link(const net::LinkNext& l) {
    if (!stage_) return Status::InvalidArgument("LinkNext before LoadModel");
    const std::string name = l.host + ":" + std::to_string(l.port);
    Result<net::Socket> s = net::Socket::Connect(l.host, l.port, 3000);
    if (!s.ok()) return s.status().WithContext("next stage " + name);
    Result<net::WorkerInfo> info = net::ClientHandshake(*s, net::Role::kUpstream, o_.key);
    if (!info.ok()) return info.status().WithContext("next stage " + name);
    TANDEM_RETURN_IF_ERROR(net::WriteMessage(*s, MsgType::kAttach, net::Attach{id_}));
    std::shared_ptr<Connection> down = Connection::Start(
        std::move(*s), "next stage " + name, [](uint16_t, std::span<const uint8_t>) {},
        [this, name](const Status& why) {
          if (!finished_) Fail(0, Status::IOError("link to the next stage " + name + " lost: " + why.message()));
        });
    {
      std::lock_guard<std::mutex> lock(mu_);
      down_ = down;
    }
    Get(&main_)->Send(MsgType::kLinked, net::Empty{});
    return Status::Ok();
  }

  void RunForward(net::Forward& f) {
    if (!stage_) return Fail(f.request, Status::InvalidArgument("Forward before LoadModel"));
    const model::ModelParams& p = stage_->params();
    if (f.n_embd != p.n_embd) {
      return Fail(f.request, Status::InvalidArgument("hidden states of width " + std::to_string(f.n_embd) +
                                                     " for a model of width " + std::to_string(p.n_embd)));
    }
    batch_.seq = f.seq;
    batch_.pos = f.pos;
    batch_.logits = f.wants_logits;
    batch_.tokens.clear();
    exec::StageStep step;
    step.clear_all = (f.flags & net::Forward::kClearAll) != 0;
    truncate_.clear();
    for (const net::TruncateOp& t : f.truncate) truncate_.push_back({t.seq, t.from});
    step.truncate = &truncate_;
    samplers_.clear();
    for (const net::SamplerConfig& c : f.samplers) samplers_.push_back({c.seq, FromWire(c), c.history});
    step.samplers = &samplers_;
    if (Status st = stage_->ApplyStep(step); !st.ok()) return Fail(f.request, st);
    const auto t0 = Clock::now();
    Status st = stage_->Forward(batch_, f.hidden.data());
    if (!st.ok()) {
      // A lost GPU ends the session (nothing runs on it again; the worker opens it anew for the
      // next one). Any other failed request leaves the session going (e.g. a full context).
      if (o_.device != nullptr && o_.device->lost()) return Fail(f.request, st);
      SendError(f.request, st);
      return;
    }
    f.stage_us.push_back(static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count()));
    const size_t n = f.seq.size();
    if (!stage_->is_last()) {
      std::shared_ptr<Connection> down = Get(&down_);
      if (!down) return Fail(f.request, Status::InvalidArgument("Forward before LinkNext"));
      f.hidden.assign(stage_->hidden(), stage_->hidden() + n * p.n_embd);
      down->Send(MsgType::kForward, f);
      return;
    }
    if (!(f.flags & (net::Forward::kSample | net::Forward::kReturnLogits))) return;
    net::ResultMsg r;
    r.request = f.request;
    r.stage_us = f.stage_us;
    if (f.flags & net::Forward::kSample) {
      if (Status sst = stage_->Sample(batch_, &r.tokens, f.guesses); !sst.ok()) {
        SendError(f.request, sst);
        return;
      }
    }
    if (f.flags & net::Forward::kReturnLogits) {
      r.n_vocab = static_cast<uint32_t>(p.n_vocab);
      r.logits.assign(stage_->logits(), stage_->logits() + stage_->n_logits() * p.n_vocab);
    }
    Get(&main_)->Send(MsgType::kResult, r);
  }

  void Log(const std::string& line) const {
    if (o_.log) {
      o_.log(line);
    } else {
      std::fprintf(stderr, "tandem worker: %s\n", line.c_str());
    }
  }

  const WorkerOptions o_;
  const uint64_t free_memory_;
  int64_t gpu_layers_ = 0;  // of the stage's layers, those on the GPU (the last ones)
  std::string peer_;
  std::atomic<uint64_t> id_{0};
  std::atomic<bool> finished_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool busy_ = false;  // a task is running (on the compute thread or inline); guarded by mu_
  static constexpr size_t kInlineForwardTokens = 4;
  std::shared_ptr<Connection> main_, up_, down_;
  std::thread compute_, heartbeat_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<exec::Stage> stage_;
  model::Batch batch_;
  std::vector<exec::Truncation> truncate_;   // the current Forward's, in the stage's form
  std::vector<exec::SequenceSampler> samplers_;
  WeightReceiver receiver_;  // weights arriving from the main node (no local copy)
};

StageSession::StageSession(const WorkerOptions& options, uint64_t free_memory, std::string peer)
    : impl_(std::make_unique<Impl>(options, free_memory, std::move(peer))) {}
StageSession::~StageSession() = default;
const std::string& StageSession::peer() const { return impl_->peer(); }
uint64_t StageSession::id() const { return impl_->id(); }
bool StageSession::finished() const { return impl_->finished(); }
void StageSession::Begin(net::Socket s) { impl_->Begin(std::move(s)); }
Status StageSession::AttachUpstream(net::Socket s, const std::string& peer) {
  return impl_->AttachUpstream(std::move(s), peer);
}
void StageSession::Shutdown(const std::string& why) { impl_->Shutdown(why); }
void StageSession::Join() { impl_->Join(); }

}  // namespace tandem::pipeline
