#include "base/progress.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace tandem {
namespace {

TEST(ProgressTest, FormatsPercentRateAndTimeLeft) {
  EXPECT_EQ(FormatProgress("copying", 512u << 20, 1024u << 20, 2.0),
            "copying  50% (512.0 of 1024.0 MiB, 256.0 MiB/s, 2 s left)");
  EXPECT_EQ(FormatProgress("copying", 1024u << 20, 1024u << 20, 4.0), "copying 100% (1024.0 of 1024.0 MiB, 256.0 MiB/s)");
  EXPECT_EQ(FormatProgress("x", 0, 10u << 20, 0), "x   0% (0.0 of 10.0 MiB)");
  EXPECT_EQ(FormatProgress("y", 768u << 20, 1024u << 20, 2.0, 256u << 20), "y  75% (768.0 of 1024.0 MiB, 256.0 MiB/s, 1 s left)");
}

// The main node shows a worker's load from the worker's messages: when the first it hears is the
// last (a fast copy), the rate is unknown, not the whole size over the microseconds since.
TEST(ProgressTest, AnOperationFirstSeenAtItsEndShowsNoRate) {
  std::vector<std::string> lines;
  Progress p("worker: copying", [&](const std::string& l) { lines.push_back(l); });
  p.Update(200u << 20, 200u << 20);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "worker: copying 100% (200.0 of 200.0 MiB)");
}

TEST(ProgressTest, OneLinePerQuarterAndAlwaysTheEnd) {
  std::vector<std::string> lines;
  Progress p("load", [&](const std::string& l) { lines.push_back(l); }, 0, std::chrono::hours(1));
  for (uint64_t d = 0; d <= 100; ++d) p.Update(d, 100);
  p.Update(100, 100);  // nothing after the end
  ASSERT_EQ(lines.size(), 5u);  // 0 %, 25 %, 50 %, 75 %, 100 %
  EXPECT_EQ(lines.front().substr(0, 9), "load   0%");
  EXPECT_EQ(lines.back().substr(0, 9), "load 100%");
}

TEST(ProgressTest, SmallOperationsStayQuietAndTimeAlsoTriggersALine) {
  std::vector<std::string> lines;
  Progress quiet("q", [&](const std::string& l) { lines.push_back(l); }, 1000);
  quiet.Update(999, 999);
  EXPECT_TRUE(lines.empty());
  Progress timed("t", [&](const std::string& l) { lines.push_back(l); }, 0, std::chrono::milliseconds(1));
  timed.Update(1, 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  timed.Update(2, 1000);  // same quarter, but the interval passed
  EXPECT_EQ(lines.size(), 2u);
}

}  // namespace
}  // namespace tandem
