#include "pipeline/coordinator.h"

#include <sodium.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "base/progress.h"
#include "base/clock.h"
#include "base/sys.h"
#include "kernels/speed.h"
#include "modelstore/model_files.h"
#include "pipeline/wire.h"
#include "net/socket.h"

namespace tandem::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
using net::Connection;
using net::MsgType;

// "placement (22 layers, context 4096):\n"
std::string PlanHeading(const model::ModelParams& p, int64_t n_ctx) {
  return "placement (" + std::to_string(p.n_layer) + " layers, context " + std::to_string(n_ctx) + "):\n";
}

// The round trip to a worker just connected (its session answers pings from the start): the
// least of three, in milliseconds.
Result<double> MeasureRoundTrip(net::Socket& s) {
  double best = 1e9;
  for (uint64_t i = 1; i <= 3; ++i) {
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(net::WriteMessage(s, MsgType::kPing, net::Ping{i}));
    TANDEM_ASSIGN_OR_RETURN(net::Ping pong, net::ReadMessage<net::Ping>(s, MsgType::kPong, 3000));
    if (pong.id != i) return Status::Corruption("answered ping " + std::to_string(i) + " with " + std::to_string(pong.id));
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return best;
}

// This machine's matrix-vector speed on `threads` threads, measured once per process (0.1-0.3 s;
// a resumption re-plans without measuring again).
float MainNodeSpeed(int threads) {
  static std::mutex mu;
  static std::map<int, float> measured;
  std::lock_guard<std::mutex> lock(mu);
  auto it = measured.find(threads);
  if (it == measured.end()) it = measured.emplace(threads, kernels::MeasureMatVecSpeed(threads)).first;
  return it->second;
}

Result<ConnectedWorkers> ConnectWorkers(const ExecutorOptions& o, const std::function<void(const std::string&)>& log) {
  ConnectedWorkers c;
  NodeInfo main{"main (this machine)", sys::Memory().available};
  // This machine's speed, as each worker measured its own: the plan predicts each stage's time.
  if (!o.workers.empty()) main.matvec_gbps = MainNodeSpeed(o.threads);
  if (o.context.device != nullptr && o.context.gpu_layers != 0) {
    main.gpu_memory = o.context.device->info().memory_bytes;
    if (!o.workers.empty()) {
      Result<double> gbps = gpu::MeasureReadBandwidth(*o.context.device);
      if (gbps.ok()) main.gpu_gbps = *gbps;
    }
  }
  c.nodes.push_back(main);
  for (const std::string& w : o.workers) {
    std::string host;
    uint16_t port = 0;
    TANDEM_RETURN_IF_ERROR(net::ParseHostPort(w, net::kDefaultPort, &host, &port));
    const std::string name = host + ":" + std::to_string(port);
    Result<net::Socket> s = net::Socket::Connect(host, port, o.connect_timeout_ms);
    if (!s.ok()) return s.status().WithContext("worker " + name);
    Result<net::WorkerInfo> info = net::ClientHandshake(*s, net::Role::kMainNode, o.key);
    if (!info.ok()) return info.status().WithContext("worker " + name);
    Result<double> rtt = MeasureRoundTrip(*s);
    if (!rtt.ok()) return rtt.status().WithContext("worker " + name);
    char line[512];
    std::snprintf(line, sizeof line, "worker %s: protocol %u, %s, %s, %u threads, %.1f GiB free, Q4_K matvec %.1f GB/s, round trip %.2f ms",
                  name.c_str(), net::kProtocolVersion, info->name.c_str(), info->cpu_features.c_str(), info->threads,
                  info->free_memory / 1073741824.0, info->matvec_gbps, *rtt);
    log(line);
    NodeInfo node{name, info->free_memory, info->matvec_gbps, *rtt};
    if (!info->gpus.empty()) {
      const net::GpuInfo& g = info->gpus[0];
      node.gpu_memory = g.memory;
      node.gpu_gbps = g.read_gbps;
      log("worker " + name + ": GPU " + g.name + " (" + g.description + "), " + std::to_string(g.memory >> 20) +
          " MiB, read " + std::to_string(static_cast<int>(g.read_gbps)) + " GB/s");
    }
    c.names.push_back(name);
    c.nodes.push_back(node);
    c.addrs.emplace_back(host, port);
    c.sockets.push_back(std::move(*s));
  }
  return c;
}

void EndSessions(std::vector<net::Socket>* sockets) {
  for (net::Socket& s : *sockets) {  // nothing was loaded: end the sessions at once
    (void)net::WriteMessage(s, MsgType::kEndSession, net::Empty{});
    s.Close();
  }
  sockets->clear();
}

}  // namespace

void LogLine(const ExecutorOptions& o, const std::string& line) {
  if (o.log) {
    o.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

Result<PlannedPipeline> PlanPipeline(const model::Model& model, const ExecutorOptions& o,
                                     const std::function<void(const std::string&)>& log) {
  const model::ModelParams& p = model.params();
  PlannedPipeline pp;
  TANDEM_ASSIGN_OR_RETURN(pp.workers, ConnectWorkers(o, log));
  ConnectedWorkers& c = pp.workers;
  Result<Plan> plan = MakePlan(Footprint(model.file(), p, o.n_ctx, o.context.type_k, o.context.type_v), c.nodes, o.plan);
  if (!plan.ok()) {
    EndSessions(&c.sockets);
    return plan.status();
  }
  log(PlanHeading(p, o.n_ctx) + plan->ToString(c.nodes));
  // Workers the plan leaves out: their sessions end now.
  ConnectedWorkers kept;
  kept.nodes.push_back(c.nodes[0]);
  for (PlannedStage& s : plan->stages) {
    if (s.node == 0) continue;
    const size_t w = static_cast<size_t>(s.node - 1);
    kept.names.push_back(c.names[w]);
    kept.nodes.push_back(c.nodes[s.node]);
    kept.addrs.push_back(c.addrs[w]);
    kept.sockets.push_back(std::move(c.sockets[w]));
    s.node = static_cast<int>(kept.nodes.size() - 1);
  }
  std::vector<net::Socket> unused;
  for (net::Socket& s : c.sockets) {
    if (s.valid()) unused.push_back(std::move(s));
  }
  EndSessions(&unused);
  pp.workers = std::move(kept);
  pp.plan = std::move(plan).value();
  return pp;
}

Result<std::string> DescribePlan(const model::Model& model, const ExecutorOptions& o) {
  std::string out;
  TANDEM_ASSIGN_OR_RETURN(PlannedPipeline pp, PlanPipeline(model, o, [&](const std::string& l) { out += l + "\n"; }));
  EndSessions(&pp.workers.sockets);
  return out;
}

struct Coordinator::Impl {
  const model::Model* model = nullptr;
  ExecutorOptions o;
  std::vector<std::string> names;  // worker i -> "HOST:PORT"
  std::vector<std::shared_ptr<Connection>> conns;
  Plan plan;
  std::vector<NodeInfo> nodes;
  std::unique_ptr<exec::Stage> stage;  // the main node's own layers: the first stage
  int64_t n_ctx = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::optional<Status> failure;                   // sticky: the session is unusable
  std::string failed_node;                         // "HOST:PORT" of the worker it came from
  std::map<uint64_t, Result<net::ResultMsg>> results;  // by request
  std::vector<std::optional<net::Loaded>> loaded;
  std::vector<bool> linked;
  std::mutex progress_mu;
  std::vector<std::unique_ptr<Progress>> load_progress;  // per worker, for its LoadProgress frames
  std::vector<std::string> load_what;
  bool closing = false;
  bool pending_clear = false;  // the next Run tells every stage to drop all sequences
  uint64_t next_request = 0;
  uint64_t next_ticket = 0;
  std::map<uint64_t, std::vector<uint64_t>> tickets;  // submitted batch -> requests to collect
  std::thread pinger;
  std::vector<std::thread> streamers;  // weights to workers without a copy

  model::Batch sub;
  net::Forward fwd;
  std::vector<float> logits;

  void Log(const std::string& s) const { LogLine(o, s); }

  std::string StageName(size_t i) const {
    const PlannedStage& s = plan.stages[i + 1];
    return "worker " + names[i] + " (layers " + std::to_string(s.layer_begin) + "-" +
           std::to_string(s.layer_end - 1) + ")";
  }

  // `worker`: the index of the worker it came from (npos: none in particular).
  void SetFailure(Status st, size_t worker = std::string::npos) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failure && !closing) {
      failure = std::move(st);
      if (worker < names.size()) failed_node = names[worker];
    }
    cv.notify_all();
  }

  void OnFrame(size_t i, uint16_t type, std::span<const uint8_t> p) {
    switch (static_cast<MsgType>(type)) {
      case MsgType::kPong:
        return;
      case MsgType::kResult: {
        Result<net::ResultMsg> r = net::ResultMsg::Decode(p);
        if (!r.ok()) return SetFailure(r.status().WithContext(StageName(i)), i);
        std::lock_guard<std::mutex> lock(mu);
        const uint64_t req = r->request;
        results.insert_or_assign(req, std::move(r));
        cv.notify_all();
        return;
      }
      case MsgType::kError: {
        Result<net::ErrorMsg> e = net::ErrorMsg::Decode(p);
        if (!e.ok()) return SetFailure(e.status().WithContext(StageName(i)), i);
        Status st = e->ToStatus().WithContext(StageName(i));
        if (e->request == 0) return SetFailure(st, i);
        std::lock_guard<std::mutex> lock(mu);
        results.insert_or_assign(e->request, Result<net::ResultMsg>(st));
        cv.notify_all();
        return;
      }
      case MsgType::kLoadProgress: {
        Result<net::LoadProgress> lp = net::LoadProgress::Decode(p);
        if (!lp.ok()) return SetFailure(lp.status().WithContext(StageName(i)), i);
        std::lock_guard<std::mutex> lock(progress_mu);  // one reader thread per worker
        if (!load_progress[i] || load_what[i] != lp->what) {
          load_what[i] = lp->what;
          load_progress[i] = std::make_unique<Progress>(StageName(i) + ": " + lp->what,
                                                        [this](const std::string& l) { Log(l); });
        }
        load_progress[i]->Update(lp->done, lp->total);
        return;
      }
      case MsgType::kLoaded: {
        Result<net::Loaded> l = net::Loaded::Decode(p);
        if (!l.ok()) return SetFailure(l.status().WithContext(StageName(i)), i);
        std::lock_guard<std::mutex> lock(mu);
        loaded[i] = *l;
        cv.notify_all();
        return;
      }
      case MsgType::kNeedWeights: {
        std::lock_guard<std::mutex> lock(mu);
        if (closing) return;
        streamers.emplace_back([this, i] { StreamWeights(i); });
        return;
      }
      case MsgType::kLinked: {
        std::lock_guard<std::mutex> lock(mu);
        linked[i] = true;
        cv.notify_all();
        return;
      }
      default:
        SetFailure(Status::Corruption(StageName(i) + " sent an unexpected " +
                                      std::string(net::MsgTypeName(type)) + " frame"), i);
    }
  }

  // Waits until pred() holds (called under the lock), a failure, or a silent worker.
  Status Wait(const std::function<bool()>& pred) {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      if (failure) return *failure;
      if (pred()) return Status::Ok();
      cv.wait_for(lock, std::chrono::milliseconds(100));
      for (size_t i = 0; i < conns.size(); ++i) {
        const int64_t silent = MsSince(conns[i]->last_receive());
        if (!failure && silent > o.dead_after_ms) {
          failure = Status::IOError(StageName(i) + " has not answered for " + std::to_string(silent) +
                                    " ms: the worker or its link is dead");
          failed_node = names[i];
        }
      }
    }
  }

  // Sends worker i the bytes of its stage, paced by its send queue, then WeightsDone.
  void StreamWeights(size_t i) {
    const PlannedStage& s = plan.stages[i + 1];
    const gguf::GgufFile& f = model->file();
    const std::vector<modelstore::ByteRange> ranges = modelstore::StageRanges(f, s.layer_begin, s.layer_end, i + 2 == plan.stages.size());
    const gguf::TensorInfo& t0 = f.tensors().front();
    const uint8_t* base = t0.data - t0.file_offset;  // the whole file is mapped
    const uint64_t total = modelstore::TotalBytes(ranges);
    constexpr uint64_t kChunk = 4u << 20;
    Log(StageName(i) + ": has no copy of the model; sending its " + std::to_string(total >> 20) + " MiB");
    uint64_t sent = 0;
    Progress progress(StageName(i) + ": sending weights", [this](const std::string& l) { Log(l); });
    net::WeightsChunk c;
    for (const modelstore::ByteRange& r : ranges) {
      for (uint64_t off = 0; off < r.size; off += kChunk) {
        for (;;) {
          {
            std::lock_guard<std::mutex> lock(mu);
            if (closing || failure) return;
          }
          if (conns[i]->closed()) return;
          if (conns[i]->queued_bytes() < (32u << 20)) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        const uint64_t n = std::min(kChunk, r.size - off);
        c.offset = r.offset + off;
        c.total = total;
        c.bytes.assign(base + c.offset, base + c.offset + n);
        conns[i]->Send(MsgType::kWeightsChunk, c);
        sent += n;
        progress.Update(sent, total);
      }
    }
    conns[i]->Send(MsgType::kWeightsDone, net::WeightsDone{});
  }

  // Asks every worker to load its stage (LoadModel, answered by Loaded), then links each worker
  // to the next (LinkNext, answered by Linked).
  Status LoadAndLink(const std::string& model_path, const std::vector<std::pair<std::string, uint16_t>>& addrs) {
    const size_t nw = conns.size();
    // The digest of every tensor: each worker checks what it uses against them, whichever copy it
    // has. Hashed once per file (a record keeps them for as long as the file's size and
    // modification time stay the same).
    bool hashed = false;
    std::unique_ptr<Progress> hashing;
    auto on_hash = [&](uint64_t done, uint64_t total) {
      if (!hashing) {
        hashing = std::make_unique<Progress>("hashing the model's tensors (first use of this file)",
                                             [this](const std::string& l) { Log(l); });
      }
      hashing->Update(done, total);
    };
    const auto hash_start = Clock::now();
    Result<modelstore::ModelDigests> hashed_digests =
        modelstore::DigestModel(model_path, model->file(), o.digest_record_dir, on_hash, &hashed);
    if (!hashed_digests.ok()) return hashed_digests.status();
    if (hashed) {
      const double s = std::max<int64_t>(MsSince(hash_start), 1) / 1000.0;
      char line[160];
      std::snprintf(line, sizeof line, "hashed the model's tensors in %.2f s (%.2f GB/s)", s,
                    model->file().file_size() / s / 1e9);
      Log(line);
    }
    const modelstore::ModelDigests& digests = *hashed_digests;
    const modelstore::ModelId& id = digests.id;
    if (sodium_init() < 0) return Status::Internal("libsodium failed to initialise");
    uint64_t session = 0;
    while (session == 0) randombytes_buf(&session, sizeof session);
    for (size_t i = 0; i < nw; ++i) {
      const PlannedStage& s = plan.stages[i + 1];
      net::LoadModel lm;
      lm.session = session;
      lm.model_name = std::filesystem::path(model_path).filename().string();
      lm.model_path = std::filesystem::absolute(model_path).string();
      lm.file_size = id.file_size;
      lm.header_digest = id.digest;
      lm.tensor_digests = digests.tensors;
      lm.layer_begin = static_cast<uint32_t>(s.layer_begin);
      lm.layer_end = static_cast<uint32_t>(s.layer_end);
      lm.n_ctx = static_cast<uint32_t>(n_ctx);
      lm.flash_attn = o.context.flash_attn;
      lm.last_stage = i + 1 == nw;
      lm.use_mmap = o.use_mmap;
      lm.cache_k = o.context.type_k == quant::TensorType::kQ8_0 ? net::KvType::kQ8_0 : net::KvType::kF16;
      lm.cache_v = o.context.type_v == quant::TensorType::kQ8_0 ? net::KvType::kQ8_0 : net::KvType::kF16;
      conns[i]->Send(MsgType::kLoadModel, lm);
    }
    TANDEM_RETURN_IF_ERROR(Wait([&] {
      for (const auto& l : loaded) if (!l) return false;
      return true;
    }));
    for (size_t i = 0; i < nw; ++i) {
      Log(StageName(i) + ": ready, weights from " + loaded[i]->source + " (" +
          std::to_string(loaded[i]->bytes_received) + " weight bytes received over the network)");
    }
    for (size_t i = 0; i + 1 < nw; ++i) {
      conns[i]->Send(MsgType::kLinkNext, net::LinkNext{addrs[i + 1].first, addrs[i + 1].second});
    }
    return Wait([&] {
      for (size_t i = 0; i + 1 < nw; ++i) if (!linked[i]) return false;
      return true;
    });
  }

  void PingLoop() {
    uint64_t n = 0;
    std::unique_lock<std::mutex> lock(mu);
    while (!closing) {
      cv.wait_for(lock, std::chrono::milliseconds(o.ping_interval_ms));
      if (closing) return;
      ++n;
      lock.unlock();  // a failed send calls back into SetFailure, which takes the lock
      for (auto& c : conns) c->Send(MsgType::kPing, net::Ping{n});
      lock.lock();
    }
  }
};

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Coordinator::~Coordinator() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.closing = true;
  }
  m.cv.notify_all();
  if (m.pinger.joinable()) m.pinger.join();
  for (std::thread& t : m.streamers) t.join();
  for (auto& c : m.conns) c->Close();
  for (auto& c : m.conns) c->Join();
}

Status Coordinator::CheckOptions(const model::Model& model, const ExecutorOptions& o) {
  if (o.workers.empty()) return Status::InvalidArgument("no workers given");
  if (o.ubatch < 0 || o.ubatch > net::kMaxBatchTokens) {
    return Status::InvalidArgument("--ubatch-size must be 1.." + std::to_string(net::kMaxBatchTokens) +
                                   " (or 0: chosen per prompt)");
  }
  if (o.context.type_k == quant::TensorType::kF32 || o.context.type_v == quant::TensorType::kF32) {
    return Status::Unsupported("an f32 KV cache is not available with workers (use f16 or q8_0)");
  }
  return model::CheckContextOptions(model.params(), o.context);
}

Result<std::unique_ptr<Coordinator>> Coordinator::Open(model::Model& model,
                                                       const std::string& model_path,
                                                       const ExecutorOptions& o) {
  TANDEM_RETURN_IF_ERROR(CheckOptions(model, o));
  TANDEM_ASSIGN_OR_RETURN(PlannedPipeline planned,
                          PlanPipeline(model, o, [&](const std::string& l) { LogLine(o, l); }));
  return Open(model, model_path, o, std::move(planned));
}

Result<std::unique_ptr<Coordinator>> Coordinator::Open(model::Model& model, const std::string& model_path,
                                                       const ExecutorOptions& o, PlannedPipeline planned) {
  TANDEM_RETURN_IF_ERROR(CheckOptions(model, o));
  if (planned.plan.stages.size() < 2) {
    return Status::InvalidArgument("the plan keeps no worker (this machine alone is predicted faster; --plan memory uses every worker)");
  }
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.model = &model;
  m.o = o;
  m.n_ctx = o.n_ctx;  // callers clamp to the training context where they want to
  ConnectedWorkers& workers = planned.workers;
  std::vector<net::Socket>& sockets = workers.sockets;
  const std::vector<std::pair<std::string, uint16_t>>& addrs = workers.addrs;
  m.names = workers.names;
  m.nodes = workers.nodes;
  m.plan = planned.plan;

  // Start the connections.
  const size_t nw = sockets.size();
  m.loaded.resize(nw);
  m.linked.assign(nw, false);
  m.load_progress.resize(nw);
  m.load_what.resize(nw);
  Impl* raw = &m;
  for (size_t i = 0; i < nw; ++i) {
    m.conns.push_back(Connection::Start(
        std::move(sockets[i]), "worker " + m.names[i],
        [raw, i](uint16_t t, std::span<const uint8_t> pl) { raw->OnFrame(i, t, pl); },
        [raw, i](const Status& why) {
          raw->SetFailure(Status::IOError(raw->StageName(i) + " disconnected: " + why.message()), i);
        }));
  }
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(impl)));
  m.pinger = std::thread([raw] { raw->PingLoop(); });

  TANDEM_RETURN_IF_ERROR(m.LoadAndLink(model_path, addrs));
  const int64_t end = m.plan.stages[0].layer_end;
  // The GPU's layers (the last of the range) go to the device from the map, never to host memory.
  const int64_t host_end = end - model::GpuLayerCount(model, m.n_ctx, 0, end, o.context);
  if (!o.use_mmap) TANDEM_RETURN_IF_ERROR(model.CopyIntoMemory(0, host_end, false));
  m.stage = std::make_unique<exec::Stage>(model, m.n_ctx, o.threads, 0, end, o.context);
  TANDEM_RETURN_IF_ERROR(m.stage->context().status());
  return c;
}

Result<uint64_t> Coordinator::Submit(const model::Batch& b, const exec::RunOptions& o) {
  Impl& m = *impl_;
  const model::ModelParams& p = m.model->params();
  const int64_t n = b.size();
  if (n == 0) return Status::InvalidArgument("empty batch");
  if (static_cast<int64_t>(b.tokens.size()) != n || static_cast<int64_t>(b.seq.size()) != n ||
      static_cast<int64_t>(b.logits.size()) != n) {
    return Status::InvalidArgument("batch fields have different lengths");
  }
  if (o.truncate.size() > net::kMaxSequenceOps || o.samplers.size() > net::kMaxSequenceOps) {
    return Status::InvalidArgument("more than " + std::to_string(net::kMaxSequenceOps) +
                                   " truncations or samplers in one batch");
  }
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.failure) return *m.failure;
  }
  bool any_marked = false;
  for (uint8_t l : b.logits) any_marked = any_marked || l;
  if ((o.sample || o.logits) && !any_marked) {
    return Status::InvalidArgument("a result was asked for but no row is marked for logits");
  }
  // The main node's stage gets the truncations directly (a clear was applied by Clear()); the
  // workers get both with the first micro-batch, in order with the data.
  exec::StageStep local;
  local.truncate = &o.truncate;
  if (!o.guesses.empty()) {
    int64_t marked = 0;
    for (uint8_t l : b.logits) marked += l;
    if (!o.sample || static_cast<int64_t>(o.guesses.size()) != marked) {
      return Status::InvalidArgument("guesses need sampling and one guess per row marked for logits");
    }
  }
  std::vector<uint64_t> expect;
  // A verification goes as one micro-batch: the last stage verifies a sequence's rows in order.
  const int64_t ubatch = !o.guesses.empty() ? n
                         : m.o.ubatch > 0 ? m.o.ubatch
                                          : exec::AutoMicroBatch(n, static_cast<int>(m.plan.stages.size()));
  TANDEM_RETURN_IF_ERROR(exec::ForEachMicroBatch(b, ubatch, &m.sub, [&](const model::Batch& sub, int64_t i,
                                                                          int64_t e) {
    bool marked = false;
    for (int64_t j = i; j < e; ++j) marked = marked || b.logits[j];
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(m.stage->Forward(sub, nullptr, i == 0 ? local : exec::StageStep{}));
    net::Forward& f = m.fwd;
    f.request = ++m.next_request;
    f.flags = 0;
    if (marked && o.logits) f.flags |= net::Forward::kReturnLogits;
    if (marked && o.sample) f.flags |= net::Forward::kSample;
    if (marked && o.sample && !o.guesses.empty()) f.flags |= net::Forward::kVerify;
    f.guesses = o.guesses;
    f.truncate.clear();
    f.samplers.clear();
    if (i == 0) {
      if (m.pending_clear) f.flags |= net::Forward::kClearAll;
      m.pending_clear = false;
      for (const exec::Truncation& t : o.truncate) f.truncate.push_back({t.seq, t.from});
      for (const exec::SequenceSampler& s : o.samplers) f.samplers.push_back(ToWire(s.seq, s.params, s.history));
    }
    f.seq = sub.seq;
    f.pos = sub.pos;
    f.wants_logits = sub.logits;
    f.n_embd = static_cast<uint32_t>(p.n_embd);
    f.hidden.assign(m.stage->hidden(), m.stage->hidden() + (e - i) * p.n_embd);
    f.stage_us.assign(1, static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count()));
    m.conns[0]->Send(MsgType::kForward, f);
    if (f.flags & (net::Forward::kSample | net::Forward::kReturnLogits)) expect.push_back(f.request);
    return Status::Ok();
  }));
  const uint64_t ticket = ++m.next_ticket;
  m.tickets.emplace(ticket, std::move(expect));
  return ticket;
}

Status Coordinator::Collect(uint64_t ticket, exec::RunOutput* out) {
  Impl& m = *impl_;
  const model::ModelParams& p = m.model->params();
  auto t = m.tickets.find(ticket);
  if (t == m.tickets.end()) return Status::InvalidArgument("no batch in flight with ticket " + std::to_string(ticket));
  const std::vector<uint64_t> expect = std::move(t->second);
  m.tickets.erase(t);
  out->tokens.clear();
  out->token = -1;
  out->n_rows = 0;
  out->stage_ms.clear();
  m.logits.clear();
  Status first_error;
  for (uint64_t req : expect) {
    // Every expected result is taken out of the map, even after an error.
    Status st = m.Wait([&] { return m.results.count(req) > 0; });
    if (!st.ok()) return st;
    Result<net::ResultMsg> r = [&] {
      std::lock_guard<std::mutex> lock(m.mu);
      auto it = m.results.find(req);
      Result<net::ResultMsg> v = std::move(it->second);
      m.results.erase(it);
      return v;
    }();
    if (!r.ok()) {
      if (first_error.ok()) first_error = r.status();
      continue;
    }
    out->tokens.insert(out->tokens.end(), r->tokens.begin(), r->tokens.end());
    if (!r->logits.empty()) {
      if (r->n_vocab != p.n_vocab) return Status::Corruption("a worker returned logits of the wrong width");
      m.logits.insert(m.logits.end(), r->logits.begin(), r->logits.end());
    }
    out->stage_ms.clear();
    for (uint32_t us : r->stage_us) out->stage_ms.push_back(us / 1000.0);
  }
  TANDEM_RETURN_IF_ERROR(first_error);
  out->n_rows = static_cast<int64_t>(m.logits.size() / p.n_vocab);
  out->logits = m.logits.data();
  for (int32_t tok : out->tokens) {
    if (tok >= 0) out->token = tok;
  }
  return Status::Ok();
}

Status Coordinator::Clear() {
  // Here now; on the workers with the next Run's first Forward (in order with the data).
  impl_->stage->Clear();
  impl_->pending_clear = true;
  return Status::Ok();
}

Status Coordinator::Health() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failure ? *impl_->failure : Status::Ok();
}

std::string Coordinator::failed_node() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failed_node;
}

int64_t Coordinator::n_ctx() const { return impl_->n_ctx; }
const model::ModelParams& Coordinator::params() const { return impl_->model->params(); }
const Plan& Coordinator::plan() const { return impl_->plan; }

uint64_t Coordinator::weight_bytes_received() const {
  uint64_t b = 0;
  for (const auto& l : impl_->loaded) if (l) b += l->bytes_received;
  return b;
}

std::vector<exec::StageInfo> Coordinator::stages() const {
  std::vector<exec::StageInfo> v;
  const std::vector<std::string> names = node_names();
  for (size_t i = 0; i < impl_->plan.stages.size(); ++i) {
    const PlannedStage& s = impl_->plan.stages[i];
    v.push_back({i < names.size() ? names[i] : "?", s.layer_begin, s.layer_end, s.compute_ms, s.link_ms});
  }
  return v;
}

std::vector<std::string> Coordinator::node_names() const {
  std::vector<std::string> v{"main"};
  for (const std::string& n : impl_->names) v.push_back(n);
  return v;
}

}  // namespace tandem::pipeline
