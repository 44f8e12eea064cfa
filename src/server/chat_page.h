// The chat page served at / (src/server/chat_page.html, embedded at build time).
#pragma once

namespace tandem::server {

extern const char kChatPage[];

}  // namespace tandem::server
