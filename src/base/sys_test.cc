#include "base/sys.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>

namespace tandem::sys {
namespace {

TEST(SysTest, MemoryIsPlausible) {
  const MemoryInfo m = Memory();
  EXPECT_GT(m.total, uint64_t{64} << 20) << "total memory " << m.total;
  EXPECT_GT(m.available, 0u);
  EXPECT_LE(m.available, m.total);
}

TEST(SysTest, PageSizeIsAPowerOfTwo) {
  const size_t p = PageSize();
  EXPECT_GE(p, 4096u);
  EXPECT_EQ(p & (p - 1), 0u) << p;
}

TEST(SysTest, DefaultThreadCountIsWithinTheCpus) {
  const int n = DefaultThreadCount();
  EXPECT_GE(n, 1);
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) {
    EXPECT_LE(n, static_cast<int>(hw));
  }
  if (PlacesThreadsByCpu()) {
    EXPECT_LE(n, static_cast<int>(CallingThreadCpus().size()));
  }
}

TEST(SysTest, CallingThreadCpusRoundTrip) {
  if (!PlacesThreadsByCpu()) GTEST_SKIP() << SystemName() << " places threads by QoS, not by CPU";
  const std::vector<int> all = CallingThreadCpus();
  ASSERT_FALSE(all.empty());
  ASSERT_TRUE(SetCallingThreadCpus({all.back()}));
  EXPECT_EQ(CallingThreadCpus(), std::vector<int>{all.back()});
  EXPECT_EQ(CurrentCpu(), all.back());
  ASSERT_TRUE(SetCallingThreadCpus(all));
  EXPECT_EQ(CallingThreadCpus(), all);
  EXPECT_FALSE(SetCallingThreadCpus({}));  // an empty set is refused, not applied
}

bool CloseOnExec(int fd) { return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }
bool NonBlocking(int fd) { return (::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

// Sockets from sys are close-on-exec, non-blocking only when asked, accepted ones blocking, and a
// send to a closed peer fails with EPIPE instead of killing the process with SIGPIPE.
TEST(SysTest, SocketsAreCloseOnExecAndSendNeverRaisesSigpipe) {
  const int listen_fd = OpenSocket(AF_INET, SOCK_STREAM, 0, /*nonblocking=*/false);
  ASSERT_GE(listen_fd, 0) << std::strerror(errno);
  EXPECT_TRUE(CloseOnExec(listen_fd));
  EXPECT_FALSE(NonBlocking(listen_fd));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listen_fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len), 0);

  const int client = OpenSocket(AF_INET, SOCK_STREAM, 0, /*nonblocking=*/true);
  ASSERT_GE(client, 0);
  EXPECT_TRUE(CloseOnExec(client));
  EXPECT_TRUE(NonBlocking(client));
  const int rc = ::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ASSERT_TRUE(rc == 0 || errno == EINPROGRESS) << std::strerror(errno);
  const int accepted = AcceptSocket(listen_fd);
  ASSERT_GE(accepted, 0) << std::strerror(errno);
  EXPECT_TRUE(CloseOnExec(accepted));
  EXPECT_FALSE(NonBlocking(accepted));

  // Close the client, then write to it until the kernel reports the broken pipe.
  ::close(client);
  const char byte = 'x';
  ssize_t n = 0;
  for (int i = 0; i < 100 && n >= 0; ++i) {
    n = SendNoSignal(accepted, &byte, 1);
    if (n >= 0) ::usleep(1000);
  }
  EXPECT_LT(n, 0) << "send to a closed peer kept succeeding";
  EXPECT_TRUE(errno == EPIPE || errno == ECONNRESET) << std::strerror(errno);
  ::close(accepted);
  ::close(listen_fd);
}

}  // namespace
}  // namespace tandem::sys
