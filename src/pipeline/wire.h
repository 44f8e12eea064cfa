// Conversions between the engine's values and their wire form (net/messages.h).
#pragma once

#include "net/messages.h"
#include "sampling/sampler.h"

namespace tandem::pipeline {

inline net::SamplerConfig ToWire(int32_t seq, const sampling::SamplerParams& p,
                                 const std::vector<int32_t>& history) {
  net::SamplerConfig c;
  c.seq = seq;
  c.temperature = p.temperature;
  c.top_k = p.top_k;
  c.top_p = p.top_p;
  c.min_p = p.min_p;
  c.repeat_last_n = p.repeat_last_n;
  c.repeat_penalty = p.repeat_penalty;
  c.frequency_penalty = p.frequency_penalty;
  c.presence_penalty = p.presence_penalty;
  c.seed = p.seed;
  c.history = history;
  c.banned = p.banned;
  c.skip_draws = p.skip_draws;
  return c;
}

inline sampling::SamplerParams FromWire(const net::SamplerConfig& c) {
  sampling::SamplerParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.top_p = c.top_p;
  p.min_p = c.min_p;
  p.repeat_last_n = c.repeat_last_n;
  p.repeat_penalty = c.repeat_penalty;
  p.frequency_penalty = c.frequency_penalty;
  p.presence_penalty = c.presence_penalty;
  p.seed = c.seed;
  p.banned = c.banned;
  p.skip_draws = c.skip_draws;
  return p;
}

}  // namespace tandem::pipeline
