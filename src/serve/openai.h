// The OpenAI API surface of canvas serve: request parsing and checking (every bad input a 400 with a
// message naming the field), the chat template, and the JSON of responses, stream chunks and errors.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/engine.h"

namespace canvas::serve {

// An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param, code;
};
// type is "invalid_request_error" for 4xx, "server_error" otherwise.
nlohmann::json error_json(int status, const std::string& message, const std::string& param = "",
                          const std::string& code = "");

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct ApiRequest {
  bool chat = false;
  std::string model;
  std::string prompt;                 // /v1/completions
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  GenerationSettings settings;
  bool max_tokens_given = false;
  bool stream = false, include_usage = false;
  bool canvas_draft = false;          // each stream chunk carries the canvas ("canvas" field)
};

// Parses a request body. Unknown fields, wrong types, out-of-range values, n != 1: ApiError 400.
ApiRequest parse_api_request(const std::string& body, bool chat);

// The Gemma chat template canvas chat uses: "<bos>" then per message "<|turn>ROLE\n{content}<turn|>\n"
// (assistant is "model"), then "<|turn>model\n" for the reply.
std::string render_chat(const std::vector<ChatMessage>& messages);

// Usage with canvas's extras: forward_passes and tokens_per_pass.
nlohmann::json usage_json(int64_t prompt_tokens, const Job& job);

}  // namespace canvas::serve
