// The K/V of a token sequence kept from one generation to the next (a chat's turns): a prompt that begins
// with the tokens the cache holds encodes only what follows them, so a turn costs its new tokens, not the
// whole conversation. One generation at a time uses it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/kv_cache.h"

namespace canvas {

struct Model;

class PrefixCache {
 public:
  // The cache for `prompt` with at least `capacity` positions. *reused: how many leading prompt tokens
  // already have their K/V there (at most prompt.size() - 1: the last prompt token is always run, for its
  // logits). The cache is emptied of its record until keep() is called, so a generation that fails or is
  // cancelled leaves nothing stale behind. A larger capacity or another model starts an empty cache.
  KvCache& acquire(const Model& model, const std::vector<int32_t>& prompt, int64_t capacity, int64_t* reused);
  // After a generation: the tokens whose K/V the cache holds from position 0 on.
  void keep(std::vector<int32_t> tokens) { tokens_ = std::move(tokens); }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::unique_ptr<KvCache> cache_;
  const Model* model_ = nullptr;
  std::vector<int32_t> tokens_;
};

}  // namespace canvas
