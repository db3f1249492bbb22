// The OpenAI API surface of canvas serve: request parsing and checking (every bad input a 400 with a
// message naming the field) and the JSON of responses, stream chunks and errors.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "decode/default_sampling.h"
#include "serve/job.h"

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

using canvas::ChatMessage;

// The endpoint a request body came to: they share the sampling fields and differ in how the input and the
// length cap are named (prompt / messages / input; max_tokens / max_output_tokens).
enum class Endpoint { Completions, ChatCompletions, Responses };
// The field of an endpoint that holds the input, and the one that caps the reply's length (for errors).
const char* input_field(Endpoint endpoint);
const char* max_tokens_field(Endpoint endpoint);

struct ApiRequest {
  Endpoint endpoint = Endpoint::Completions;
  bool chat = false;  // the input is messages (/v1/chat/completions, /v1/responses)
  std::string model;
  std::string prompt;                 // /v1/completions
  std::vector<ChatMessage> messages;  // /v1/chat/completions; /v1/responses' instructions and input
  std::string instructions;           // /v1/responses: its first message's (system) text, echoed back
  GenerationSettings settings;
  bool seed_given = false;            // else settings.sampling.seed is a fresh random one
  bool stream = false, include_usage = false;
  bool canvas_draft = false;          // each stream chunk carries the canvas ("canvas" field)
  bool echo = false;                  // /v1/completions: the prompt is written before the completion
  // Log-probabilities asked for (settings.logprobs holds how many alternatives): /v1/completions'
  // integer `logprobs`, /v1/chat/completions' `logprobs: true` with `top_logprobs`.
  bool logprobs = false;
  // The sampling settings the request gave (the model's defaults fill the rest: apply_default_sampling).
  SamplingGiven sampling_given;
  // tools and tool_choice as the client sent them (null when absent).
  nlohmann::json tools, tool_choice;
  // What the chat template gets besides the messages: `tools` (in the client's member order; none with
  // tool_choice "none") and `enable_thinking` (chat_template_kwargs.enable_thinking, else true for a
  // reasoning_effort other than "none", false for "none").
  ChatExtras chat_extras;
  // Fields accepted and ignored (unknown ones, a chat template's unused switches, tools a format cannot
  // take): the server logs each name once.
  std::vector<std::string> ignored;
  // response_format's json_schema as sent (members in document order), when parse_api_request was told to
  // leave its compile for later (SchemaCompile::Later): compile_response_format makes settings.json_schema.
  std::shared_ptr<const nlohmann::ordered_json> schema;
};

// When parse_api_request compiles a response_format json_schema: at once, or Later (the caller compiles
// r.schema, e.g. on a worker thread: a pattern's automaton may take up to its work budget, about a second).
enum class SchemaCompile { Now, Later };

// Parses a request body. Wrong types, out-of-range values, n != 1: ApiError 400. Unknown fields are
// ignored (ApiRequest::ignored), as llama-server does; so are the Responses API's fields that canvas has no
// use for (tools, text, include, previous_response_id, ...).
ApiRequest parse_api_request(const std::string& body, Endpoint endpoint,
                             SchemaCompile schema = SchemaCompile::Now);
inline ApiRequest parse_api_request(const std::string& body, bool chat,
                                    SchemaCompile schema = SchemaCompile::Now) {
  return parse_api_request(body, chat ? Endpoint::ChatCompletions : Endpoint::Completions, schema);
}

// response_format's schema as the template the generator fills; a schema it cannot compile (its size, its
// nesting, a pattern past the compile budget) is an ApiError 400 naming response_format.
std::shared_ptr<const JsonTemplate> compile_response_format(const nlohmann::ordered_json& schema);

// OpenAI's finish_reason for how a generation ended (GenerationOutput::finish_reason): "stop" for an end token
// or a stop string, "cancelled" as it is, else "length" (max_tokens or the context).
std::string openai_finish_reason(const std::string& ended);
// The completion's text as OpenAI's API gives it: with a suffix, the text inserted between the prompt and the
// suffix (the fills); else the generator's text.
std::string completion_text(const GenerationRequest& request, const GenerationOutput& out);

// Usage of a finished request, with canvas's extras: forward_passes and tokens_per_forward (also as
// tokens_per_pass, its older name). The Responses API names the counts input_tokens and output_tokens, with their details
// (reasoning_tokens 0: the thinking of a format with channels is not counted apart).
nlohmann::json usage_json(const event::Finished& finished, Endpoint endpoint = Endpoint::Completions);

}  // namespace canvas::serve
