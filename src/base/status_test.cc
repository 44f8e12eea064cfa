#include "base/status.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  TANDEM_ASSIGN_OR_RETURN(int h, Half(x));
  TANDEM_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(StatusTest, CarriesCodeAndMessageWithContext) {
  Status s = Status::Corruption("bad magic").WithContext("model.gguf");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_EQ(s.message(), "model.gguf: bad magic");
  EXPECT_EQ(s.ToString(), "corrupt: model.gguf: bad magic");
}

TEST(ResultTest, PropagatesErrorsThroughMacros) {
  EXPECT_EQ(Quarter(8).value(), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_EQ(r.value_or(-1), -1);
}

TEST(ResultTest, OkResultHasOkStatus) {
  Result<std::string> r = std::string("x");
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(*r, "x");
}

}  // namespace
}  // namespace tandem
