#include "base/byte_reader.h"

namespace tandem {

Status ByteReader::ErrorAt(uint64_t offset, std::string_view message) {
  return Status::Corruption("at byte offset " + std::to_string(offset) + ": " +
                            std::string(message));
}

Status ByteReader::Truncated(std::string_view what, uint64_t need) const {
  return Error("truncated: " + std::string(what) + " needs " + std::to_string(need) +
               " bytes, " + std::to_string(remaining()) + " remain");
}

Result<std::span<const uint8_t>> ByteReader::ReadBytes(uint64_t n, std::string_view what) {
  if (n > remaining()) return Truncated(what, n);
  std::span<const uint8_t> s = bytes_.subspan(pos_, static_cast<size_t>(n));
  pos_ += static_cast<size_t>(n);
  return s;
}

Result<std::string_view> ByteReader::ReadString64(std::string_view what, uint64_t max_len) {
  const size_t start = pos_;
  TANDEM_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
  if (len > max_len) {
    pos_ = start;
    return Error(std::string(what) + " length " + std::to_string(len) + " exceeds the limit of " +
                 std::to_string(max_len));
  }
  if (len > remaining()) {
    const uint64_t left = remaining();
    pos_ = start;
    return Error("truncated: " + std::string(what) + " of " + std::to_string(len) +
                 " bytes, but only " + std::to_string(left) + " remain after its length");
  }
  std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
  pos_ += static_cast<size_t>(len);
  return s;
}

Status ByteReader::Skip(uint64_t n, std::string_view what) {
  if (n > remaining()) return Truncated(what, n);
  pos_ += static_cast<size_t>(n);
  return Status::Ok();
}

}  // namespace tandem
