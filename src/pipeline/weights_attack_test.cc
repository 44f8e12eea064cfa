// Attacks on a worker's weights (issue #19, finding 2), each of which succeeded before the model
// identity covered the tensor data:
//   - a client with the key claims a real model's identity, streams it with one tensor changed,
//     and the worker caches it; an honest main node later computes with those weights;
//   - a worker's own copy has the right header and size but other weights (an unfinished
//     download, an edited file) and is used silently.
// After: the worker checks every tensor it uses against the digests the main node sends, so the
// honest main node's results equal the single-node run in every case.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "exec/executor.h"
#include "modelstore/model_files.h"
#include "net/auth.h"
#include "net/socket.h"
#include "pipeline/coordinator.h"
#include "pipeline/test_worker.h"

namespace tandem::pipeline {
namespace {

std::string Model(const char* name) {
  return (std::filesystem::path(TANDEM_SHARED_DIR) / "reference/models" / name).string();
}

// Logits of a 10-token prompt at every position.
std::vector<float> PromptLogits(exec::Executor& e) {
  const int64_t V = e.params().n_vocab;
  model::Batch b;
  for (int i = 0; i < 10; ++i) b.Add(static_cast<int32_t>((i * 37 + 1) % V), i, 0, true);
  exec::RunOptions o;
  o.logits = true;
  exec::RunOutput out;
  Status st = e.Run(b, o, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return {};
  return std::vector<float>(out.logits, out.logits + out.n_rows * V);
}

// The honest main node: one worker, every log line kept. Returns the prompt's logits.
std::vector<float> HonestRun(model::Model& m, const std::string& path, const std::string& worker,
                             std::string* log, Status* open_status = nullptr) {
  ExecutorOptions o;
  o.workers = {worker};
  o.n_ctx = 32;
  o.threads = 1;
  o.digest_record_dir = "";
  o.log = [log](const std::string& l) { *log += l + "\n"; };
  Result<std::unique_ptr<Coordinator>> c = Coordinator::Open(m, path, o);
  if (open_status) *open_status = c.status();
  if (!c.ok()) return {};
  std::vector<float> got = PromptLogits(**c);
  c->reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the worker frees the session
  return got;
}

// Negates the first value of the (F32) output norm in `bytes`, a copy of the file at `f`.
void PoisonOutputNorm(const gguf::GgufFile& f, std::vector<uint8_t>* bytes) {
  const gguf::TensorInfo* t = f.FindTensor("output_norm.weight");
  ASSERT_NE(t, nullptr);
  float v;
  std::memcpy(&v, bytes->data() + t->file_offset, 4);
  v = -v - 1.0f;
  std::memcpy(bytes->data() + t->file_offset, &v, 4);
}

// A client holding the key (none here) claims the real model and streams every layer and the head
// with the output norm changed. With `own_digests` it sends digests of what it streams (so they
// are consistent, but not the model's); without, the real model's. Returns the worker's answer:
// "loaded" or its error.
std::string PoisonedStream(const std::string& path, const model::Model& m, uint16_t port, bool own_digests) {
  Result<net::Socket> s = net::Socket::Connect("127.0.0.1", port, 2000);
  if (!s.ok()) return s.status().ToString();
  Result<net::WorkerInfo> info = net::ClientHandshake(*s, net::Role::kMainNode, std::nullopt);
  if (!info.ok()) return info.status().ToString();
  Result<modelstore::ModelDigests> d = modelstore::DigestModel(path, m.file(), "");
  if (!d.ok()) return d.status().ToString();
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  PoisonOutputNorm(m.file(), &bytes);
  const int64_t n_layer = m.params().n_layer;
  net::LoadModel lm;
  lm.session = 77;
  lm.model_name = "model.gguf";
  lm.file_size = d->id.file_size;
  lm.header_digest = d->id.digest;
  lm.tensor_digests = d->tensors;
  if (own_digests) {
    const gguf::TensorInfo* t = m.file().FindTensor("output_norm.weight");
    const size_t i = static_cast<size_t>(t - m.file().tensors().data());
    lm.tensor_digests[i] = modelstore::DigestBytes(std::span(bytes.data() + t->file_offset, t->n_bytes));
  }
  lm.layer_begin = 0;
  lm.layer_end = static_cast<uint32_t>(n_layer);
  lm.n_ctx = 32;
  lm.last_stage = true;
  if (!net::WriteMessage(*s, net::MsgType::kLoadModel, lm).ok()) return "send failed";
  for (;;) {
    net::FrameHeader h;
    std::vector<uint8_t> p;
    if (Status st = net::ReadFrame(*s, &h, &p, 20000); !st.ok()) return st.ToString();
    switch (static_cast<net::MsgType>(h.type)) {
      case net::MsgType::kNeedWeights: {
        const auto ranges = modelstore::StageRanges(m.file(), 0, n_layer, true);
        for (const modelstore::ByteRange& r : ranges) {
          net::WeightsChunk c;
          c.offset = r.offset;
          c.total = modelstore::TotalBytes(ranges);
          c.bytes.assign(bytes.begin() + static_cast<ptrdiff_t>(r.offset),
                         bytes.begin() + static_cast<ptrdiff_t>(r.offset + r.size));
          if (!net::WriteMessage(*s, net::MsgType::kWeightsChunk, c).ok()) return "send failed";
        }
        if (!net::WriteMessage(*s, net::MsgType::kWeightsDone, net::WeightsDone{}).ok()) return "send failed";
        break;
      }
      case net::MsgType::kLoaded:
        (void)net::WriteMessage(*s, net::MsgType::kEndSession, net::Empty{});
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return "loaded";
      case net::MsgType::kError: {
        Result<net::ErrorMsg> e = net::ErrorMsg::Decode(p);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return e.ok() ? e->message : e.status().ToString();
      }
      default:
        break;  // LoadProgress
    }
  }
}

class WeightsAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no shared models";
    Result<model::Model> loaded = model::Model::Load(path);
    ASSERT_TRUE(loaded.ok());
    m = std::make_unique<model::Model>(std::move(*loaded));
    // Every node copies its weights (the default), Q4_0 / Q5_0 / Q8_0 / Q4_K ones into the interleaved layout:
    // the single node does too, for the same arithmetic.
    ASSERT_TRUE(m->CopyIntoMemory(0, m->params().n_layer, true).ok());
    exec::LocalExecutor local(*m, 32, 1, 512);
    want = PromptLogits(local);  // the single-node run
  }
  const std::string path = Model("tiny-q4_k_m.gguf");
  std::unique_ptr<model::Model> m;
  std::vector<float> want;
};

TEST_F(WeightsAttackTest, APoisonedStreamNeverReachesAnHonestMainNode) {
  const std::string cache = ::testing::TempDir() + "tandem_poison_" + std::to_string(getpid());
  std::filesystem::remove_all(cache);
  WorkerOptions wo;
  wo.cache_dir = cache;
  TestWorker w(wo);

  // The real model's digests with other bytes: refused before anything is kept.
  const std::string refused = PoisonedStream(path, *m, w.w->port(), /*own_digests=*/false);
  EXPECT_NE(refused.find("output_norm.weight differs"), std::string::npos) << refused;
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache)) entries += e.path().extension() == ".gguf";
  EXPECT_EQ(entries, 0u) << "nothing may be cached from a stream that fails its digests";

  // Digests of the poisoned bytes: consistent, so kept, but under another model's name.
  EXPECT_EQ(PoisonedStream(path, *m, w.w->port(), /*own_digests=*/true), "loaded");

  // The honest main node never uses either: its worker receives the real weights.
  std::string log;
  EXPECT_EQ(HonestRun(*m, path, w.addr(), &log), want);
  EXPECT_NE(log.find("weights from the main node"), std::string::npos) << log;
  // And the copy it received is what the next run uses.
  log.clear();
  EXPECT_EQ(HonestRun(*m, path, w.addr(), &log), want);
  EXPECT_NE(log.find("weights from cache"), std::string::npos) << log;
  std::filesystem::remove_all(cache);
}

TEST_F(WeightsAttackTest, ALocalCopyWithTheSameHeaderButOtherWeightsIsNotUsed) {
  const std::string dir = ::testing::TempDir() + "tandem_samehdr_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string copy = dir + "/model.gguf";
  {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    PoisonOutputNorm(m->file(), &bytes);
    std::ofstream(copy, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
  Result<modelstore::ModelId> a = modelstore::IdentifyModel(path), b = modelstore::IdentifyModel(copy);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->digest, b->digest) << "the copy must look like the model by its header";
  ASSERT_EQ(a->file_size, b->file_size);

  {  // No cache to fall back on: a clear refusal, not other weights.
    WorkerOptions wo;
    wo.model_path = copy;
    TestWorker w(wo);
    std::string log;
    Status st;
    EXPECT_TRUE(HonestRun(*m, path, w.addr(), &log, &st).empty());
    EXPECT_NE(st.message().find("whose weights match"), std::string::npos) << st.ToString();
  }
  {  // With a cache: the worker receives the real weights instead.
    WorkerOptions wo;
    wo.model_path = copy;
    wo.cache_dir = dir + "/cache";
    TestWorker w(wo);
    std::string log;
    EXPECT_EQ(HonestRun(*m, path, w.addr(), &log), want);
    EXPECT_NE(log.find("weights from the main node"), std::string::npos) << log;
    EXPECT_EQ(std::filesystem::status(dir + "/cache").permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_all);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::pipeline
